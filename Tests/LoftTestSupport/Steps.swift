import LoftIO

extension EventLoop {
    /// Runs the loop once through `steps`: each is called every 10 ms until it returns true,
    /// then the next. Returns the index of the step still waiting when `seconds` passed (on
    /// the loop's clock: virtual seconds on a virtual clock), or nil when all were done.
    public func run(steps: [() -> Bool], seconds: Double) -> Int? {
        let deadline = currentTime + UInt64(seconds * 1000)
        var index = 0
        var failed: Int?
        poll(every: 10) { [unowned self] in
            while index < steps.count, steps[index]() { index += 1 }
            if index == steps.count {
                self.stop()
                return false
            } else if self.currentTime > deadline {
                failed = index
                self.stop()
                return false
            }
            return true
        }
        run()
        return failed
    }
}

extension EventLoop {
    /// Runs the loop until `done()` holds (checked every 10 ms) or `seconds` pass on the loop's
    /// clock. True when done in time.
    @discardableResult
    public func run(seconds: Double, until done: @escaping () -> Bool) -> Bool {
        run(steps: [done], seconds: seconds) == nil
    }

    /// Runs the loop until something on it calls `stop()`, or `seconds` pass on the loop's
    /// clock (a failsafe timer stops it then). True when stopped in time.
    public func runUntilStopped(seconds: Double) -> Bool {
        var timedOut = false
        let failsafe = schedule(after: UInt64(seconds * 1000)) { [unowned self] in timedOut = true; self.stop() }
        run()
        cancel(failsafe)
        return !timedOut
    }
}

extension EventLoop {
    /// On a virtual clock (`EventLoop(clock:)`): `advance(by: step)` until `done()` holds or
    /// `limitMs` have passed, without waiting in real time; the virtual milliseconds it took
    /// (`limitMs` or a step more when not done).
    @discardableResult
    public func advance(step: UInt64 = 10, limitMs: UInt64, until done: () -> Bool) -> UInt64 {
        var passed: UInt64 = 0
        while !done() && passed < limitMs {
            advance(by: step)
            passed += step
        }
        return passed
    }
}

extension EventLoop {
    /// Calls `check` every `ms` milliseconds (a timer that schedules the next) while it
    /// returns true.
    public func poll(every ms: UInt64, _ check: @escaping () -> Bool) {
        schedule(after: ms) { [unowned self] in
            if check() { self.poll(every: ms, check) }
        }
    }
}
