/// A FIFO of bytes: appended at the back, consumed from the front, storage reused. Used for a
/// session's output and for each stream's received bytes.
public struct ByteQueue: Sendable {
    private var storage: [UInt8] = []
    private var head = 0

    public init() {}

    public var count: Int { storage.count - head }
    public var isEmpty: Bool { storage.count == head }
    /// Bytes of storage held (for memory accounting).
    public var capacity: Int { storage.capacity }

    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        makeRoom(bytes.count)
        storage.append(contentsOf: bytes.assumingMemoryBound(to: UInt8.self))
    }

    public mutating func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { append($0) }
    }

    /// Lets `body` append to the backing array (for the frame encoder). It must only append.
    public mutating func withAppendableStorage<R, E: Error>(reserving n: Int,
                                                            _ body: (inout [UInt8]) throws(E) -> R) throws(E) -> R {
        makeRoom(n)
        return try body(&storage)
    }

    /// The bytes at the front, without consuming them.
    public func withUnsafeReadableBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let h = head
        return try storage.withUnsafeBytes { p in
            try body(UnsafeRawBufferPointer(rebasing: p[h...]))
        }
    }

    /// Drops `n` bytes from the front (clamped to `count`).
    public mutating func consume(_ n: Int) {
        head += max(0, min(n, count))
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        }
    }

    /// Copies up to `buffer.count` bytes from the front into `buffer` and consumes them.
    public mutating func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let n = min(buffer.count, count)
        guard n > 0, let dst = buffer.baseAddress else { return 0 }
        withUnsafeReadableBytes { src in dst.copyMemory(from: src.baseAddress!, byteCount: n) }
        consume(n)
        return n
    }

    /// All queued bytes as an array; the queue is left empty.
    public mutating func takeAll() -> [UInt8] {
        let out = Array(storage[head...])
        removeAll()
        return out
    }

    /// Makes room for `n` bytes in all without growing on the way (a fresh replay piece).
    public mutating func reserveCapacity(_ n: Int) { storage.reserveCapacity(n) }

    /// Empties the queue; with `keepingCapacity: false` the storage is released.
    public mutating func removeAll(keepingCapacity: Bool = false) {
        storage.removeAll(keepingCapacity: keepingCapacity)
        head = 0
    }

    /// Before appending `n` bytes: move the live bytes to the front when the consumed prefix is
    /// at least half the storage, so the array does not grow while the queue stays small.
    private mutating func makeRoom(_ n: Int) {
        if head > 0 && (head >= storage.count / 2 || storage.count + n > storage.capacity) {
            storage.removeSubrange(0..<head)
            head = 0
        }
    }
}
