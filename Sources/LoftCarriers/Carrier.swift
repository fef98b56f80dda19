import CNgtcp2
import LoftCore
import LoftHTTP
import LoftIO
import LoftQUIC
import LoftTLS

/// The carriers this module builds.
public enum CarrierKind: String, Sendable, CaseIterable {
    case ws
    case get
    case h2
    case quic
    case h3
}

/// What a server saw of the request that opened a carrier (the listener's admit hook gets it
/// before the carrier exists; the carrier keeps it).
public struct CarrierRequest: Sendable {
    public var kind: CarrierKind
    public var peer: Endpoint?
    public var path: String
    public var query: String?
    /// The first request's headers (get: the GET's).
    public var headers: HTTPHeaders
    /// get: the client's session id (32 lowercase hex digits); nil for ws and h2.
    public var sessionID: String?
}

/// Events of one carrier, on the loop thread.
public protocol CarrierDelegate: AnyObject {
    /// Client side: the channel is up (TLS verified, upgrade or GET/POST pair accepted); writes
    /// are taken from now on. Server carriers are handed over already connected and never
    /// call this.
    func carrierConnected(_ carrier: Carrier)
    /// Session bytes, in order. The buffer is valid only during the call and must be used
    /// whole (copy what is kept). `setReading(false)` inside the call stops further deliveries
    /// at once; the rest stays in the carrier until `setReading(true)`.
    func carrier(_ carrier: Carrier, received bytes: UnsafeRawBufferPointer)
    /// Space freed after a `write` took less than it was given.
    func carrierWritable(_ carrier: Carrier)
    /// The carrier ended; nothing follows.
    func carrier(_ carrier: Carrier, closed reason: CarrierCloseReason)
    /// quic: one DATAGRAM frame's payload (valid only during the call).
    func carrier(_ carrier: Carrier, datagram bytes: UnsafeRawBufferPointer)
    /// quic, front: the client opened a stream for one flow. True: the delegate keeps it (and
    /// sets its events); false: it is reset.
    func carrier(_ carrier: Carrier, flowOpened flow: QuicFlow) -> Bool
}

extension CarrierDelegate {
    public func carrier(_ carrier: Carrier, datagram bytes: UnsafeRawBufferPointer) {}
    public func carrier(_ carrier: Carrier, flowOpened flow: QuicFlow) -> Bool { false }
}

/// A reliable, ordered, bidirectional byte channel for one loft session. Message and chunk
/// boundaries carry no meaning. Everything happens on the loop thread.
public protocol Carrier: AnyObject {
    var kind: CarrierKind { get }
    /// Client (dialled by the holder) or server (accepted by the front).
    var side: CarrierSide { get }
    var delegate: CarrierDelegate? { get set }
    /// True between connected (or accepted) and closed.
    var isOpen: Bool { get }
    /// The peer's address (the front, or the client), once known.
    var peer: Endpoint? { get }
    /// Server side: the request that opened it.
    var request: CarrierRequest? { get }
    /// "TLSv1.3 TLS_AES_256_GCM_SHA384 alpn=http/1.1", for logs.
    var tlsDescription: String { get }

    /// Takes up to `bytes.count` bytes into the carrier's bounded output buffer and returns how
    /// many it took (0 when full or not open). When it took less than offered,
    /// `carrierWritable` follows once at least half the buffer is free. Bytes taken in one
    /// loop iteration are framed together (one ws frame / one chunk per 64 KiB) and sent
    /// after the current batch of events.
    func write(_ bytes: UnsafeRawBufferPointer) -> Int
    /// How many bytes `write` would take now.
    var writableBytes: Int { get }
    /// Bytes taken but not yet handed to the kernel (framing included).
    var bufferedBytes: Int { get }
    /// After `close()`: everything the carrier had to send has left (quic: its
    /// CONNECTION_CLOSE too); nothing more will.
    var drained: Bool { get }
    /// Sends what is buffered now instead of after the current batch of events.
    func flush()
    /// Pauses (false) or resumes (true) deliveries. While paused nothing is read from the
    /// socket, so the peer is held back by TCP.
    func setReading(_ on: Bool)
    /// Graceful close: buffered bytes go out, then the carrier's own end (ws Close, get last
    /// chunk), then TLS close_notify. The delegate hears nothing more.
    func close()
    /// Immediate close, nothing more is sent.
    func abort()
    /// Client: moves the connection to a new local socket (the host's path changed) without
    /// ending it. False when the carrier cannot (every carrier over TCP); otherwise `done`
    /// runs once, on the loop, with the outcome of the new path's validation.
    func migrate(_ done: @escaping (Bool) -> Void) -> Bool
    /// The largest datagram `sendDatagram` takes (quic: what fits one QUIC DATAGRAM frame in a
    /// packet); 0 for carriers without datagrams.
    var maxDatagram: Int { get }
    /// Sends one unreliable datagram; false when it cannot (too big, queue full, not open).
    func sendDatagram(_ bytes: UnsafeRawBufferPointer) -> Bool
    /// quic and h3: the largest UDP payload sent on the path now (what both ends announced,
    /// and path MTU discovery found); 0 for carriers over TCP.
    var maxPacket: Int { get }
    /// Carriers over TCP, while open: what the kernel says of each TCP connection (ws, h2: one;
    /// get: the GET's then the POST's): Multipath TCP with its subflows, or plain TCP. Read from
    /// the kernel at each call (for status, never on the data path); empty for quic and h3.
    var multipath: [Multipath] { get }
}

extension Carrier {
    /// Tells the delegate that the carrier closed, once: the delegate is let go first, so
    /// nothing reaches it afterwards. Logged as `carrier.<kind>.closed` at debug level.
    func notifyClosed(_ reason: CarrierCloseReason, logging extra: [(String, Any)] = []) {
        let d = delegate
        delegate = nil
        Log.emit(.debug, "carrier.\(kind.rawValue).closed", [("peer", peer.map { "\($0)" } ?? "")] + extra + [("reason", reason)])
        d?.carrier(self, closed: reason)
    }
}

extension Carrier {
    /// Hands `range` of `c`'s input to the delegate (nothing when empty).
    @inline(__always)
    func deliver(_ c: TLSConnection, _ range: Range<Int>) {
        if range.count > 0 { delegate?.carrier(self, received: UnsafeRawBufferPointer(start: c.input + range.lowerBound, count: range.count)) }
    }
}

extension Carrier {
    public func migrate(_ done: @escaping (Bool) -> Void) -> Bool { false }
    public var maxDatagram: Int { 0 }
    public var maxPacket: Int { 0 }
    public var multipath: [Multipath] { [] }
    /// Carriers over TCP: the TLS output is empty (what is left is the kernel's).
    public var drained: Bool { bufferedBytes == 0 }
    public func sendDatagram(_ bytes: UnsafeRawBufferPointer) -> Bool { false }
}

/// Where and how a client dials.
public struct CarrierClientOptions: Sendable {
    public var kind: CarrierKind
    /// Name or IP literal (IPv6 with or without brackets).
    public var host: String
    public var port: UInt16
    /// The session path on the front, as in `/loft`.
    public var path: String
    public var tls: TLSClientOptions
    /// Name resolution, TCP, TLS and the carrier handshake together.
    public var connectTimeoutMs: UInt64
    /// Output buffer per TLS connection (the bound on bytes a slow peer can make us hold).
    public var outputBufferBytes: Int
    /// quic and h3: the largest UDP payload sent and taken (nil: 1452 with path MTU discovery).
    public var quicMaxPacket: Int?
    /// ws, get, h2: the TCP connections are made as Multipath TCP (IPPROTO_MPTCP), plain TCP
    /// when the front or a middlebox does not speak it (`Carrier.multipath` tells which).
    public var multipath = false

    public init(kind: CarrierKind, host: String, port: UInt16, path: String = "/loft", tls: TLSClientOptions,
                connectTimeoutMs: UInt64 = 10_000, outputBufferBytes: Int = 256 * 1024) {
        self.kind = kind
        self.host = host
        self.port = port
        self.path = path
        self.tls = tls
        self.connectTimeoutMs = connectTimeoutMs
        self.outputBufferBytes = outputBufferBytes
    }

    /// The Host header: the server name (or host) with the port unless it is 443.
    var hostHeader: String {
        var h = tls.serverName ?? host
        if h.contains(":") && !h.hasPrefix("[") { h = "[\(h)]" }
        return port == 443 ? h : "\(h):\(port)"
    }

    var verifyName: String {
        var h = tls.serverName ?? host
        if h.hasPrefix("[") && h.hasSuffix("]") { h = String(h.dropFirst().dropLast()) }
        return h
    }
}

/// Dials carriers to one front. Make it once (the TLS context, with its CA file, is loaded
/// here) and call `dial` for each connection attempt.
public final class CarrierClient {
    public let options: CarrierClientOptions
    let runtime: CarrierRuntime
    let context: TLSContext
    /// quic: GnuTLS credentials (the CA file, pin or insecure), for every connection.
    private(set) var quicCreds: OpaquePointer?

    public init(_ options: CarrierClientOptions, runtime: CarrierRuntime) throws {
        guard options.path.hasPrefix("/"), !options.path.contains("?"), !options.path.contains(" ") else {
            throw TLSError("carrier path must start with / and have no query: \(options.path)")
        }
        self.options = options
        self.runtime = runtime
        context = try TLSContext(client: options.tls, alpn: options.kind == .h2 ? ["h2"] : ["http/1.1"])
        if options.kind == .quic || options.kind == .h3 {
            var err = [CChar](repeating: 0, count: 256)
            let pin = options.tls.pinSHA256
            let c = pin.withOptionalBytes { p in
                cngtcp2_client_creds_new(options.tls.caFile, p, options.tls.insecure ? 1 : 0, &err, err.count)
            }
            guard let c else { throw TLSError("quic: \(cText(err))") }
            quicCreds = c
        }
    }

    deinit {
        if let quicCreds { cngtcp2_creds_free(quicCreds) }
    }

    /// Starts a connection; its outcome arrives as `carrierConnected` or `carrier(_:closed:)`
    /// (never from inside this call). The caller keeps the carrier alive.
    public func dial(delegate: CarrierDelegate) -> Carrier {
        switch options.kind {
        case .ws: return started(WSCarrier(client: self, delegate: delegate), WSCarrier.start)
        case .get: return started(GetClientCarrier(client: self, delegate: delegate), GetClientCarrier.start)
        case .h2: return started(H2Carrier(client: self, delegate: delegate), H2Carrier.start)
        case .quic: return started(QuicCarrier(client: self, delegate: delegate), QuicCarrier.start)
        case .h3: return started(H3Carrier(client: self, delegate: delegate), H3Carrier.start)
        }
    }

    private func started<C: Carrier>(_ c: C, _ start: (C) -> () -> Void) -> Carrier {
        start(c)()
        return c
    }

    /// A TLS connection to the front (its addresses in turn) for a carrier over TCP: 64 KiB of
    /// input, the configured output buffer unless told.
    func dialTLS(_ addresses: [Endpoint], owner: TLSConnectionOwner, inputBytes: Int = 64 * 1024,
                 outputBytes: Int? = nil) -> TLSConnection {
        TLSConnection.dial(runtime: runtime, context: context, serverName: options.verifyName, addresses: addresses,
                           inputBytes: inputBytes, outputBytes: outputBytes ?? options.outputBufferBytes,
                           multipath: options.multipath, owner: owner)
    }

    /// Resolves the host, then calls `body` with the addresses, or ends with connectFailed.
    func resolve(_ fail: @escaping (CarrierCloseReason) -> Void, _ body: @escaping ([Endpoint]) -> Void) {
        let port = options.port
        let host = options.host
        runtime.resolve(host) { addresses in
            if addresses.isEmpty { fail(.connectFailed("no address for \(host)")) } else { body(addresses.map { Endpoint($0, port) }) }
        }
    }
}
