import Glibc
import LoftCore

/// The tests' one fake outbound: an in-memory `Outbound` that makes each stream with `make`
/// (a `TestStream` unless told) and each association as a `TestAssociation`, and keeps them, in
/// order, for the test; or, made `forwardingTo:` another outbound, hands every flow to it and
/// only counts. `onOpen` runs on each stream it made, inside openStream.
public final class FakeOutbound<Stream: ByteStream>: Outbound {
    public let name: String
    private let type: String
    private let make: (Destination, ByteStreamEvents) -> Stream
    private let inner: Outbound?
    /// The streams and associations it made (none when forwarding).
    public var streams: [Stream] = []
    public var associations: [TestAssociation] = []
    public var onOpen: ((Stream) -> Void)?
    /// Flows it was given (made or forwarded).
    public private(set) var streamsOpened = 0
    public private(set) var associationsOpened = 0

    public init(name: String, type: String = "test", forwardingTo inner: Outbound? = nil,
                make: @escaping (Destination, ByteStreamEvents) -> Stream) {
        self.name = name
        self.type = type
        self.inner = inner
        self.make = make
    }

    public var status: OutboundStatus {
        var s = OutboundStatus(name: name, type: type, state: "ready")
        s.flows = UInt64(streamsOpened + associationsOpened)
        return s
    }

    public func openStream(to destination: Destination, events: ByteStreamEvents) -> ByteStream {
        streamsOpened += 1
        if let inner { return inner.openStream(to: destination, events: events) }
        let s = make(destination, events)
        streams.append(s)
        onOpen?(s)
        return s
    }

    public func openAssociation(events: DatagramEvents) -> DatagramAssociation? {
        associationsOpened += 1
        if let inner { return inner.openAssociation(events: events) }
        let a = TestAssociation(events: events)
        associations.append(a)
        return a
    }
}

/// The fake outbound with the fake stream.
public typealias TestOutbound = FakeOutbound<TestStream>

extension FakeOutbound where Stream == TestStream {
    /// In memory, TestStreams; or, `forwardingTo` another outbound, counting.
    public convenience init(name: String = "test", type: String = "test", forwardingTo inner: Outbound? = nil) {
        self.init(name: name, type: type, forwardingTo: inner) { TestStream(destination: $0, events: $1) }
    }
}

/// An outbound byte stream the test controls: when it connects or fails, how many bytes its
/// writes take, what there is to read and when EOF or a failure comes. The harness delivers its
/// readiness once per loop turn, level-triggered like epoll but within the ByteStream contract:
/// `streamReadable` only while read interest is on and something is readable (a reset while
/// reads are paused is reported by `fail`, once), `streamWritable` once after a write came up
/// short or `writeRoom` was 0, when there is room again. Every call from the stack is counted.
public final class TestStream: ByteStream {
    public weak var events: ByteStreamEvents?
    public let destination: Destination

    /// Bytes the stack wrote, in order.
    public var written: [UInt8] = []
    /// Bytes writes may still take (Int.max: unlimited). `grant(_:)` adds more.
    public var room = Int.max
    /// The most one write call takes (a socket buffer that drains between calls).
    public var maxPerWrite = Int.max
    private var writeCameUpShort = false
    /// Bytes waiting for the stack to read.
    private var readable: [UInt8] = []
    private var readOffset = 0
    /// Bytes the stack read in total.
    public var bytesRead = 0
    private var eofPending = false
    /// What reads return once the bytes are gone (a reset by the remote).
    private var readFailure: FlowFailure?

    public private(set) var connected = false
    public private(set) var readInterest = false

    // What the stack did.
    public private(set) var readCalls = 0
    public private(set) var writeCalls = 0
    public private(set) var readableEvents = 0
    public private(set) var writableEvents = 0
    public private(set) var interestChanges: [Bool] = []
    public private(set) var shutdownWriteCalls = 0
    public private(set) var closeCalls = 0
    public private(set) var resetCalls = 0
    public var isFinished: Bool { closeCalls > 0 || resetCalls > 0 || failedReported }
    private var failedReported = false

    public init(destination: Destination, events: ByteStreamEvents) {
        self.destination = destination
        self.events = events
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

    /// The remote reset, reported only through reads (`read` returns `.failed`).
    public func breakReads(_ failure: FlowFailure) {
        readable = []
        readOffset = 0
        readFailure = failure
    }

    /// The remote sent these bytes.
    public func supply(_ bytes: [UInt8]) { readable += bytes }

    /// The remote finished sending (EOF after the bytes supplied).
    public func finishSending() { eofPending = true }

    /// Lets writes take `n` more bytes.
    public func grant(_ n: Int) { room = room == Int.max ? Int.max : room + n }

    public var unread: Int { readable.count - readOffset }

    /// One loop turn's readiness for this stream.
    public func deliverReadiness() {
        guard closeCalls == 0, resetCalls == 0, !failedReported else { return }
        if writeCameUpShort && room > 0 {
            writeCameUpShort = false
            writableEvents += 1
            events?.streamWritable(self)
        }
        let hasSomething = unread > 0 || eofPending || readFailure != nil
        if hasSomething && readInterest {
            readableEvents += 1
            events?.streamReadable(self)
        }
    }

    // MARK: ByteStream

    /// What the next write takes. Reporting 0 promises a streamWritable once room is granted.
    public var writeRoom: Int {
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
        if room != Int.max { room -= taken }
        if short { writeCameUpShort = true }
        return taken
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamReadResult {
        readCalls += 1
        if unread > 0 {
            let n = min(buffer.count, unread)
            readable.withUnsafeBytes { src in
                buffer.baseAddress!.copyMemory(from: src.baseAddress! + readOffset, byteCount: n)
            }
            readOffset += n
            bytesRead += n
            if readOffset == readable.count { readable = []; readOffset = 0 }
            return .data(n)
        }
        if let f = readFailure { return .failed(f) }
        if eofPending { return .eof }
        return .wouldBlock
    }

    public func setReadInterest(_ on: Bool) {
        if on != readInterest { interestChanges.append(on) }
        readInterest = on
    }

    public func shutdownWrite() { shutdownWriteCalls += 1 }
    public func close() { closeCalls += 1 }
    public func reset() { resetCalls += 1 }
}

/// The outbound side of one UDP association: what the stack sent, replies on demand.
public final class TestAssociation: DatagramAssociation {
    public weak var events: DatagramEvents?
    public var sent: [(payload: [UInt8], to: Destination)] = []
    public private(set) var closed = false

    public init(events: DatagramEvents) { self.events = events }

    public func send(_ payload: UnsafeRawBufferPointer, to destination: Destination) -> Bool {
        sent.append((Array(payload), destination))
        return true
    }

    public func close() { closed = true }

    /// A reply from `remote`.
    public func reply(_ payload: [UInt8], from remote: Endpoint) {
        payload.withUnsafeBytes { events?.datagramReceived($0, from: remote) }
    }
}
