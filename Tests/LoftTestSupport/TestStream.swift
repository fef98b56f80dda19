import Glibc
import LoftCore

/// The tests' one fake byte stream, in memory, every move the test's: when it connects or
/// fails, how many bytes its writes take (`room`, `grant`, `drain`), what there is to read
/// (`incoming`, `supply`, `feed`) and when EOF (`eof`, `finishInput`) or a failure (`fail`,
/// `breakReads`) comes. Every call on it is counted.
///
/// Its events come when the test says: at once (`feed`, `finishInput`, `drain`, `fail`), or
/// once per loop turn through `deliverReadiness()` (the netstack harness), level-triggered like
/// epoll but within the ByteStream contract: `streamReadable` only while read interest is on
/// and something is readable (a reset while reads are paused is reported by `fail`, once),
/// `streamWritable` once after a write came up short or `writeRoom` was 0, when there is room
/// again. Optional: zero-copy reads (`zeroCopy`: `peek` shows the bytes in two iovecs) and
/// in-place writes (`inPlace`: `writeSpace` in pieces of `piece` bytes, as a QUIC send ring).
public final class TestStream: ByteStream {
    public weak var events: ByteStreamEvents?
    public let destination: Destination

    /// Bytes written, in order, and each write call's bytes (calls that took nothing left out).
    public var written: [UInt8] = []
    public var writes: [[UInt8]] = []
    /// Bytes writes may still take (Int.max: unlimited). `grant(_:)` adds more.
    public var room = Int.max
    /// The most one write call takes (a socket buffer that drains between calls).
    public var maxPerWrite = Int.max
    /// Whether `writeRoom` says what writes would take (false: Int.max, "write and see").
    public var announcesRoom: Bool
    private var writeCameUpShort = false
    /// Bytes waiting to be read.
    private var readable: [UInt8] = []
    private var readOffset = 0
    /// Bytes read in total.
    public var bytesRead = 0
    /// EOF after the bytes there are.
    public var eof = false
    /// What reads return once the bytes are gone (a reset by the remote).
    private var readFailure: FlowFailure?
    /// Called inside write(), after taking bytes (a stream that reports events from inside a
    /// write).
    public var onWrite: (() -> Void)?
    /// `peek` offers the bytes as two iovecs over a copy the stream owns until consume (an end
    /// that holds its bytes, as lwIP's does); off, only `read`.
    public var zeroCopy = false
    /// Writes taken in place (`writeSpace`/`commitWrite`), in pieces of at most `piece` bytes.
    public var inPlace = false
    public var piece = 3_000
    public private(set) var commits = 0

    public private(set) var connected = false
    public private(set) var readInterest: Bool

    // What was done to it.
    public private(set) var readCalls = 0
    public private(set) var writeCalls = 0
    public private(set) var readableEvents = 0
    public private(set) var writableEvents = 0
    public private(set) var interestChanges: [Bool] = []
    public private(set) var shutdownWriteCalls = 0
    public private(set) var closeCalls = 0
    public private(set) var resetCalls = 0
    public var shut: Bool { shutdownWriteCalls > 0 }
    public var closed: Bool { closeCalls > 0 }
    public var isFinished: Bool { closeCalls > 0 || resetCalls > 0 || failedReported }
    private var failedReported = false

    private var peeked: UnsafeMutableRawBufferPointer?
    private var space: UnsafeMutableRawBufferPointer?

    /// `readInterest`: whether reads are wanted before anyone says (an outbound's stream waits
    /// to be asked; an app's end is read from the start).
    public init(destination: Destination = .ip(Endpoint(.v4(0), 0)), events: ByteStreamEvents? = nil,
                readInterest: Bool = false, announcesRoom: Bool = true) {
        self.destination = destination
        self.events = events
        self.readInterest = readInterest
        self.announcesRoom = announcesRoom
    }

    deinit {
        peeked?.deallocate()
        space?.deallocate()
    }

    // MARK: the test's controls

    /// The remote accepted the connection.
    public func connect() {
        connected = true
        events?.streamConnected(self)
    }

    /// The stream broke (connecting failed, or the remote reset): one streamFailed.
    public func fail(_ failure: FlowFailure) {
        failedReported = true
        readable = []
        readOffset = 0
        readFailure = failure
        events?.streamFailed(self, failure)
    }

    /// The remote reset, reported only through reads (`read` returns `.failed`; writes -1).
    public func breakReads(_ failure: FlowFailure) {
        readable = []
        readOffset = 0
        readFailure = failure
    }

    /// The bytes not read yet; setting replaces them.
    public var incoming: [UInt8] {
        get { Array(readable[readOffset...]) }
        set { readable = newValue; readOffset = 0 }
    }

    /// The remote sent these bytes (no event).
    public func supply(_ bytes: [UInt8]) { readable += bytes }

    /// The remote sent these bytes: streamReadable at once while reads are wanted.
    public func feed(_ bytes: [UInt8]) {
        readable += bytes
        if readInterest { events?.streamReadable(self) }
    }

    /// The remote finished sending (EOF after the bytes supplied; no event).
    public func finishSending() { eof = true }

    /// EOF: streamReadable at once while reads are wanted.
    public func finishInput() {
        eof = true
        if readInterest { events?.streamReadable(self) }
    }

    /// Lets writes take `n` more bytes (no event).
    public func grant(_ n: Int) { room = room == Int.max ? Int.max : room + n }

    /// Lets writes take `n` more bytes: streamWritable at once.
    public func drain(_ n: Int) {
        grant(n)
        events?.streamWritable(self)
    }

    public var unread: Int { readable.count - readOffset }

    /// One loop turn's readiness for this stream.
    public func deliverReadiness() {
        guard closeCalls == 0, resetCalls == 0, !failedReported else { return }
        if writeCameUpShort && room > 0 {
            writeCameUpShort = false
            writableEvents += 1
            events?.streamWritable(self)
        }
        let hasSomething = unread > 0 || eof || readFailure != nil
        if hasSomething && readInterest {
            readableEvents += 1
            events?.streamReadable(self)
        }
    }

    // MARK: ByteStream

    /// What the next write takes. Reporting 0 promises a streamWritable once room is granted.
    public var writeRoom: Int {
        guard announcesRoom else { return Int.max }
        let limit = min(room, maxPerWrite)
        if limit == 0 { writeCameUpShort = true }
        return limit
    }

    public func write(_ segments: UnsafePointer<iovec>, count: Int) -> Int {
        writeCalls += 1
        if readFailure != nil || closeCalls > 0 || resetCalls > 0 { return -1 }
        var taken = 0
        var short = false
        let limit = min(room, maxPerWrite)
        let before = written.count
        for i in 0..<count {
            let iov = segments[i]
            let want = Int(iov.iov_len)
            let n = min(want, limit == Int.max ? want : limit - taken)
            if n > 0 {
                written += UnsafeRawBufferPointer(start: iov.iov_base, count: n)
                taken += n
            }
            if n < want { short = true; break }
        }
        if taken > 0 { writes.append(Array(written[before...])) }
        if room != Int.max { room -= taken }
        if short { writeCameUpShort = true }
        onWrite?()
        return taken
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        readCalls += 1
        if unread > 0 {
            let n = min(buffer.count, unread)
            readable.withUnsafeBytes { src in
                buffer.baseAddress!.copyMemory(from: src.baseAddress! + readOffset, byteCount: n)
            }
            consume(n)
            return .data(n)
        }
        if let f = readFailure { return .failed(f) }
        if eof { return .eof }
        return .wouldBlock
    }

    public func peek(_ iov: UnsafeMutablePointer<iovec>, max: Int, count: inout Int) -> StreamReadResult? {
        guard zeroCopy else { return nil }
        readCalls += 1
        count = 0
        let n = unread
        if n == 0 { return readFailure.map { .failed($0) } ?? (eof ? .eof : .wouldBlock) }
        // Two iovecs (one for a single byte) over a copy the stream owns until consume.
        peeked?.deallocate()
        let p = UnsafeMutableRawBufferPointer.allocate(byteCount: n, alignment: 1)
        readable.withUnsafeBytes { p.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[readOffset...])) }
        peeked = p
        let half = n / 2
        if half == 0 || max < 2 {
            iov[0] = iovec(iov_base: p.baseAddress, iov_len: n)
            count = 1
        } else {
            iov[0] = iovec(iov_base: p.baseAddress, iov_len: half)
            iov[1] = iovec(iov_base: p.baseAddress! + half, iov_len: n - half)
            count = 2
        }
        return .data(n)
    }

    public func consume(_ n: Int) {
        readOffset += n
        bytesRead += n
        if readOffset == readable.count { readable = []; readOffset = 0 }
    }

    public func writeSpace(max: Int) -> UnsafeMutableRawBufferPointer? {
        guard inPlace else { return nil }
        if space == nil { space = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 1) }
        let n = Swift.min(max, room, piece, space!.count)
        return UnsafeMutableRawBufferPointer(rebasing: space![0..<n])
    }

    public func commitWrite(_ n: Int) {
        written += UnsafeRawBufferPointer(rebasing: space![0..<n])
        if room != Int.max { room -= n }
        commits += 1
    }

    public func setReadInterest(_ on: Bool) {
        if on != readInterest { interestChanges.append(on) }
        readInterest = on
    }

    public func shutdownWrite() { shutdownWriteCalls += 1 }
    public func close() { closeCalls += 1 }
    public func reset() { resetCalls += 1 }
}
