import LoftIO

extension EventLoop {
    /// Runs the loop once through `steps`: each is called every 10 ms until it returns true,
    /// then the next. Returns the index of the step still waiting when `seconds` passed, or nil
    /// when all were done. The loop cannot run twice, so one run per loop.
    public func run(steps: [() -> Bool], seconds: Double) -> Int? {
        let deadline = monotonicMilliseconds() + UInt64(seconds * 1000)
        var index = 0
        var failed: Int?
        every(10) { [unowned self] in
            while index < steps.count, steps[index]() { index += 1 }
            if index == steps.count {
                self.stop()
            } else if monotonicMilliseconds() > deadline {
                failed = index
                self.stop()
            }
        }
        run()
        return failed
    }
}
