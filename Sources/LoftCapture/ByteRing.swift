import Glibc

/// A capture client's bounded buffer: bytes appended at the tail, written to the client's
/// socket from the head, wrapping at the end. Its capacity is fixed when it is made; what does
/// not fit is refused (the caller counts the packet lost), never grown.
struct ByteRing {
    let capacity: Int
    private let base: UnsafeMutableRawPointer
    private var head = 0
    private(set) var count = 0

    init(capacity: Int) {
        self.capacity = capacity
        base = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    }

    /// Frees the storage; the ring is not used after.
    func deallocate() { base.deallocate() }

    var free: Int { capacity - count }
    var isEmpty: Bool { count == 0 }

    /// Appends all of `bytes` (the caller checked `free`).
    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard let src = bytes.baseAddress, bytes.count > 0 else { return }
        precondition(bytes.count <= free)
        let tail = (head + count) % capacity
        let first = min(bytes.count, capacity - tail)
        (base + tail).copyMemory(from: src, byteCount: first)
        if first < bytes.count { base.copyMemory(from: src + first, byteCount: bytes.count - first) }
        count += bytes.count
    }

    mutating func append(_ bytes: [UInt8]) { bytes.withUnsafeBytes { append($0) } }

    /// Forgets the last `n` bytes appended (not yet written).
    mutating func dropLast(_ n: Int) {
        count -= min(n, count)
    }

    /// Up to two pieces holding the buffered bytes in order, for one writev.
    func pieces() -> (iovec, iovec, Int) {
        let first = min(count, capacity - head)
        let a = iovec(iov_base: base + head, iov_len: first)
        let b = iovec(iov_base: base, iov_len: count - first)
        return (a, b, count - first > 0 ? 2 : 1)
    }

    /// The first `n` bytes have been written.
    mutating func consume(_ n: Int) {
        head = (head + n) % capacity
        count -= n
        if count == 0 { head = 0 }
    }
}
