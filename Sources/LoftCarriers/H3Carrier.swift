import LoftCore
import LoftHTTP
import LoftIO
import LoftQUIC
import LoftTLS

/// The `h3` carrier: a quic carrier's connection (ALPN `h3`) with HTTP/3 (`H3Streams`,
/// nghttp3) on its streams (docs/protocol.md §1.3). The session is the body of an extended
/// CONNECT (`:protocol loft`) on the client's first request stream, each flow the body of a
/// CONNECT `loft-flow` on a request stream of its own. The `QuicCarrier` keeps the connection,
/// its socket, the session's state and the flows; this part, made once the QUIC handshake
/// chose h3, is from then on the connection's delegate: the streams' events go to HTTP/3, and
/// HTTP/3's (request bodies readable, writable, reset; the session's CONNECT answered or
/// accepted) come back to the carrier, which reads and writes the bodies through `streams`.
final class H3Carrier: QuicConnectionDelegate, H3StreamsDelegate {
    static let alpn = H3Streams.alpn

    /// The request streams over the connection's QUIC streams.
    let streams: H3Streams
    private weak var carrier: QuicCarrier?

    /// HTTP/3 on `c` for `carrier`: nil when nghttp3 cannot start.
    init?(carrier: QuicCarrier, connection c: QuicConnection) {
        let server = carrier.side == .server
        guard let h = H3Streams(quic: c, server: server, maxRequests: server ? c.limits.maxStreamsBidi : 0) else { return nil }
        streams = h
        self.carrier = carrier
        h.delegate = self
    }

    /// Client: sends the session's CONNECT (`carrierConnected` follows its 200). Server: the
    /// session is the carrier's once a CONNECT is accepted; a connection that sends none within
    /// the handshake timeout is closed.
    func start() {
        guard let carrier, let q = carrier.quic else { return }
        if let client = carrier.client {
            let o = client.options
            streams.path = o.path
            streams.authority = o.port == 443 ? o.host : "\(o.host):\(o.port)"
            guard streams.openStream(ringCap: nil) == carrier.sessionStream else {
                carrier.fail(.protocolError("cannot open the session stream"))
                return
            }
            return
        }
        streams.path = carrier.listener?.h3Path ?? "/loft"
        let limit = q.limits.handshakeTimeoutMs
        q.loop.schedule(after: limit) { [weak carrier] in
            guard let carrier, carrier.state == .handshake else { return }
            carrier.fail(.timeout("no HTTP/3 CONNECT within \(limit) ms"))
        }
    }

    // MARK: QuicConnectionDelegate: the streams' events to HTTP/3, the connection's to the carrier

    func quicHandshakeDone(_ c: QuicConnection) {}
    func quicReadable(_ c: QuicConnection, stream: Int64) { streams.quicReadable(stream) }
    func quicWritable(_ c: QuicConnection, stream: Int64) { streams.quicWritable(stream) }
    func quicStreamReset(_ c: QuicConnection, stream: Int64, code: UInt64) { streams.quicReset(stream, code: code) }
    /// h3 negotiates no HTTP datagrams (nghttp3 0.8 cannot send SETTINGS_H3_DATAGRAM).
    func quicDatagram(_ c: QuicConnection, _ bytes: UnsafeRawBufferPointer) {}
    func quicClosed(_ c: QuicConnection, _ reason: CarrierCloseReason) { carrier?.quicClosed(c, reason) }
    func quicConnectionID(_ c: QuicConnection, _ id: QuicCID, add: Bool) { carrier?.quicConnectionID(c, id, add: add) }

    // MARK: H3StreamsDelegate: the request streams' events are the streams' own

    func h3Readable(_ stream: Int64) { carrier?.streamReadable(stream) }
    func h3Writable(_ stream: Int64) { carrier?.streamWritable(stream) }
    func h3Reset(_ stream: Int64, code: UInt64) { carrier?.streamReset(stream, code: code) }
    func h3Failed(_ reason: CarrierCloseReason) { carrier?.fail(reason) }
    func h3Refused(_ stream: Int64, status: Int, reason: String, nth: Int) {
        guard let carrier else { return }
        carrier.listener?.refusedH3(carrier, status: status, reason: reason, nth: nth)
    }

    /// Server: the session's CONNECT was accepted: the carrier goes to the listener.
    func h3Accepted(_ stream: Int64, session: Bool) {
        guard session else { return }
        carrier?.h3SessionAccepted(path: streams.path)
    }

    /// Client: the answer to a CONNECT: the session's opens the carrier; a flow's refusal
    /// fails that flow.
    func h3Response(_ stream: Int64, status: Int) {
        guard let carrier else { return }
        if stream == carrier.sessionStream {
            guard carrier.state == .handshake else { return }
            guard status == 200 else {
                carrier.fail(.rejected(status: status, "the front answered the session's CONNECT with \(status)"))
                return
            }
            carrier.h3SessionOpened()
            return
        }
        guard status != 200 else { return }
        streams.reset(stream, code: 0x102)
        carrier.h3FlowRefused(stream)
    }
}

extension QuicLimits {
    /// h3: the peer's control and QPACK streams (RFC 9114 needs 3; 8 leave room for others).
    static var h3: QuicLimits {
        var l = QuicLimits()
        l.maxStreamsUni = 8
        l.maxStreamDataUni = 64 << 10
        return l
    }
}
