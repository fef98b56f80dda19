import Glibc

/// A stream's received bytes not yet read, for the QUIC streams and HTTP/3 request bodies:
/// appended at the end, read from the front, or shown in place (`readable`) and consumed, so a
/// splice writes them straight to the other side. Storage is kept while at most 256 KiB when
/// it empties (a burst does not pin its high-water mark on an idle stream); its owner calls
/// `release()` when it lets go of the stream (and in its deinit).
package struct ReceiveQueue {
    private var base: UnsafeMutableRawPointer?
    private var capacity = 0
    private var start = 0
    private var end = 0

    package init() {}

    package static let kept = 256 * 1024

    package var available: Int { end - start }

    /// The bytes not yet read, in place: valid until the next append, consume or release.
    package var readable: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base.map { UnsafeRawPointer($0 + start) }, count: end - start)
    }

    package mutating func append(_ p: UnsafePointer<UInt8>, _ n: Int) {
        guard n > 0 else { return }
        if end + n > capacity {
            if start > 0 {
                if end > start { memmove(base!, base! + start, end - start) }
                end -= start
                start = 0
            }
            if end + n > capacity {
                let grown = Swift.max(end + n, capacity * 2, 4096)
                let b = UnsafeMutableRawPointer.allocate(byteCount: grown, alignment: 16)
                if let base {
                    b.copyMemory(from: base, byteCount: end)
                    base.deallocate()
                }
                base = b
                capacity = grown
            }
        }
        (base! + end).copyMemory(from: p, byteCount: n)
        end += n
    }

    /// Hands up to `max` bytes to `body` in place and consumes them; how many.
    package mutating func drain(upTo max: Int, _ body: (UnsafeRawBufferPointer) -> Void) -> Int {
        let n = min(max, available)
        guard n > 0 else { return 0 }
        body(UnsafeRawBufferPointer(start: base! + start, count: n))
        consume(n)
        return n
    }

    /// Drops `n` bytes from the front.
    package mutating func consume(_ n: Int) {
        start += min(n, available)
        if start == end {
            start = 0
            end = 0
            if capacity > Self.kept { release() }
        }
    }

    /// Drops everything and its storage.
    package mutating func release() {
        base?.deallocate()
        base = nil
        capacity = 0
        start = 0
        end = 0
    }
}
