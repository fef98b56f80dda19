/// A stream's received bytes not yet read, for the QUIC streams and HTTP/3 request bodies:
/// appended at the end, read from the front; emptied storage is reused (kept while at most
/// 256 KiB, so a burst does not pin its high-water mark on an idle stream).
struct ReceiveQueue {
    private var bytes: [UInt8] = []
    private var start = 0

    var available: Int { bytes.count - start }

    mutating func append(_ p: UnsafePointer<UInt8>, _ n: Int) {
        if start > 0 && start == bytes.count {
            bytes.removeAll(keepingCapacity: true)
            start = 0
        }
        bytes.append(contentsOf: UnsafeBufferPointer(start: p, count: n))
    }

    /// Copies up to `into.count` bytes out and consumes them; how many.
    mutating func read(into: UnsafeMutableRawBufferPointer) -> Int {
        let n = min(into.count, available)
        guard n > 0 else { return 0 }
        bytes.withUnsafeBytes { into.baseAddress!.copyMemory(from: $0.baseAddress! + start, byteCount: n) }
        consume(n)
        return n
    }

    /// Hands up to `max` bytes to `body` in place and consumes them; how many.
    mutating func drain(upTo max: Int, _ body: (UnsafeRawBufferPointer) -> Void) -> Int {
        let n = min(max, available)
        guard n > 0 else { return 0 }
        bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[start..<start + n])) }
        consume(n)
        return n
    }

    private mutating func consume(_ n: Int) {
        start += n
        if start == bytes.count {
            bytes.removeAll(keepingCapacity: bytes.capacity <= 256 * 1024)
            start = 0
        }
    }

    /// Drops everything and its storage.
    mutating func release() {
        bytes = []
        start = 0
    }
}
