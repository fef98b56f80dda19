import LoftCore
import LoftIO

/// Gives freed memory back to the system (malloc_trim, counted `memory-trims`) at two moments,
/// both deadlines on the loop's timer heap: a second after the flow table shrank to half of a
/// large peak (after a flood), and after a calm period that followed a burst of bytes.
final class MemoryTrimmer {
    private let loop: EventLoop
    private let meter: SpliceMeter
    /// Times memory was given back.
    private(set) var trims: UInt64 = 0

    /// The most flows + associations since memory was last given back.
    private var tablePeak = 0
    private var trimTimer: TimerHandle?
    /// Tables at least this large, shrunk to half, give their memory back.
    static let trimThreshold = 1024

    /// The TCP bytes moved (both ways) when memory was last given back after a burst.
    private var trimmedAtBytes: UInt64 = 0
    private var calmTimer: TimerHandle?
    /// A burst of at least this many bytes, followed by `calmMs` with less than `calmBytes`
    /// moved, gives the heap back (malloc_trim): transfers keep up to `heapKept` of freed
    /// memory with malloc (no brk shrink and regrow per segment), and a calm stack does not.
    static let burstBytes: UInt64 = 16 << 20
    static let calmMs: UInt64 = 5_000
    static let calmBytes: UInt64 = 64 << 10

    /// The table's size when a trim deadline comes (set once by the table's owner).
    var tableCount: () -> Int = { 0 }

    init(loop: EventLoop, meter: SpliceMeter) {
        self.loop = loop
        self.meter = meter
    }

    /// The table now holds `n` flows + associations.
    func tableGrew(to n: Int) {
        if n > tablePeak { tablePeak = n }
    }

    /// After a flood the freed flows' memory stays with malloc: once the table (now `n`) has
    /// shrunk to half of a large peak, it is handed back to the system a second later, at most
    /// once a second and never per flow.
    func tableShrank(to n: Int) {
        guard tablePeak >= Self.trimThreshold, n <= tablePeak / 2, trimTimer == nil else { return }
        trimTimer = loop.schedule(after: 1000) { [weak self] in
            guard let self else { return }
            self.trimTimer = nil
            self.tablePeak = self.tableCount()
            self.giveMemoryBack()
        }
    }

    /// Bytes moved on some flow: arms the calm check if it is not armed.
    @inline(__always)
    func bytesMoved() {
        if calmTimer == nil { armCalmCheck() }
    }

    /// While bytes move: a deadline `calmMs` ahead, which stops once a calm period has come
    /// (trimming first if a burst came before it); the next bytes moved arm it again.
    private func armCalmCheck() {
        let mark = meter.bytesUp &+ meter.bytesDown
        calmTimer = loop.schedule(after: Self.calmMs) { [weak self] in
            guard let self else { return }
            self.calmTimer = nil
            let moved = self.meter.bytesUp &+ self.meter.bytesDown
            guard moved &- mark < Self.calmBytes else {
                self.armCalmCheck()
                return
            }
            if moved &- self.trimmedAtBytes >= Self.burstBytes {
                self.trimmedAtBytes = moved
                self.giveMemoryBack()
            }
        }
    }

    private func giveMemoryBack() {
        Syscall.trimHeap()
        trims &+= 1
    }
}
