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
    /// Whether a sniffed flow's name is dialled here (as holder and VLESS do).
    public var dialsSniffedNames = false

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
