import LoftCore

/// Gives freed memory back to the system (malloc_trim) after a burst of frees, on the loop's
/// timer heap: once `threshold` things (streams, flows) were freed since the last trim, one
/// trim a second later, never more than once a second and never per thing. glibc keeps what a
/// burst freed below the top of the heap (a front with 10,000 streams gone kept 90 MB of
/// which 1.3 MB was in use), so without it a process's RSS stays at its peak.
public final class HeapTrim {
    private let loop: EventLoop
    private let threshold: Int
    private var freed = 0
    private var timer: TimerHandle?
    /// Trims made.
    public private(set) var trims: UInt64 = 0

    public init(loop: EventLoop, threshold: Int = 1024) {
        self.loop = loop
        self.threshold = threshold
    }

    deinit { if let timer { loop.cancel(timer) } }

    /// `n` more things were freed.
    public func freed(_ n: Int) {
        freed += n
        guard freed >= threshold, timer == nil else { return }
        timer = loop.schedule(after: 1000) { [weak self] in
            guard let self else { return }
            self.timer = nil
            self.freed = 0
            Syscall.trimHeap()
            self.trims &+= 1
        }
    }
}
