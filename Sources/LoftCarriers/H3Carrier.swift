import LoftCore
import LoftHTTP
import LoftIO
import LoftQUIC
import LoftTLS

/// The `h3` carrier: a QUIC connection with ALPN `h3` carrying HTTP/3 (`H3Streams`, nghttp3;
/// docs/protocol.md §1.3). The session is the body of an extended CONNECT (`:protocol loft`) on
/// the client's first request stream, each flow the body of a CONNECT `loft-flow` on a request
/// stream of its own; no datagrams (nghttp3 0.8 cannot negotiate HTTP datagrams). The
/// connection, the client's socket and migration, the flows and the carrier core are
/// `QuicCarrierBase`'s; this carrier puts HTTP/3 on the connection once the QUIC handshake is
/// done: the streams' events go to HTTP/3, HTTP/3's (request bodies readable, writable, reset;
/// the session's CONNECT answered or accepted) come back here, and the session's and flows'
/// bytes go through the request bodies (`layer`). On the front the listener makes it once the
/// handshake chose `h3`; it stays in the listener's handshakes until the CONNECT is accepted.
final class H3Carrier: QuicCarrierBase, H3StreamsDelegate {
    static let alpn = H3Streams.alpn

    /// HTTP/3 on the connection, from the end of the QUIC handshake on.
    private(set) var h3: H3Streams?

    init(client: CarrierClient, delegate: CarrierDelegate) {
        super.init(client: client, delegate: delegate, kind: .h3, alpn: Self.alpn, limits: .h3, datagrams: false)
    }

    init(server entry: QuicServerConnection, listener: QuicListener, connection q: QuicConnection) {
        super.init(server: entry, listener: listener, connection: q, kind: .h3, datagrams: false)
    }

    /// HTTP/3 on the connection. Client: sends the session's CONNECT (`carrierConnected`
    /// follows its 200). Server: the session is the carrier's once a CONNECT is accepted; a
    /// connection that sends none within the handshake timeout is closed.
    override func connectionReady(_ c: QuicConnection) {
        guard let h = H3Streams(quic: c, server: isServer, maxRequests: isServer ? c.limits.maxStreamsBidi : 0) else {
            fail(.protocolError("cannot start HTTP/3"))
            return
        }
        h3 = h
        layer = h
        h.delegate = self
        if let client {
            let o = client.options
            h.path = o.path
            h.authority = o.port == 443 ? o.host : "\(o.host):\(o.port)"
            guard h.openStream(ringCap: nil) == sessionStream else {
                fail(.protocolError("cannot open the session stream"))
                return
            }
            return
        }
        h.path = listener?.h3Path ?? "/loft"
        let limit = c.limits.handshakeTimeoutMs
        c.loop.schedule(after: limit) { [weak self] in
            guard let self, self.state == .handshake else { return }
            self.fail(.timeout("no HTTP/3 CONNECT within \(limit) ms"))
        }
    }

    override func connectionDropped() { h3 = nil }

    // MARK: the streams' events to HTTP/3

    override func quicReadable(_ c: QuicConnection, stream: Int64) {
        if let h3 { h3.quicReadable(stream) } else { super.quicReadable(c, stream: stream) }
    }

    override func quicWritable(_ c: QuicConnection, stream: Int64) {
        if let h3 { h3.quicWritable(stream) } else { super.quicWritable(c, stream: stream) }
    }

    override func quicStreamReset(_ c: QuicConnection, stream: Int64, code: UInt64) {
        if let h3 { h3.quicReset(stream, code: code) } else { super.quicStreamReset(c, stream: stream, code: code) }
    }

    // MARK: H3StreamsDelegate: the request streams' events are the streams' own

    func h3Readable(_ stream: Int64) { streamReadable(stream) }
    func h3Writable(_ stream: Int64) { streamWritable(stream) }
    func h3Reset(_ stream: Int64, code: UInt64) { streamReset(stream, code: code) }
    func h3Failed(_ reason: CarrierCloseReason) { fail(reason) }
    func h3Refused(_ stream: Int64, status: Int, reason: String, nth: Int) {
        listener?.refusedH3(self, status: status, reason: reason, nth: nth)
    }

    /// Server: the session's CONNECT was accepted: the carrier goes to the listener.
    func h3Accepted(_ stream: Int64, session: Bool) {
        guard session, isServer, state == .handshake, let h3 else { return }
        state = .open
        request = CarrierRequest(kind: .h3, peer: peer, path: h3.path, query: nil, headers: HTTPHeaders(), sessionID: nil)
        if let entry { listener?.accepted(entry) }
    }

    /// Client: the answer to a CONNECT: the session's opens the carrier; a flow's refusal
    /// fails that flow.
    func h3Response(_ stream: Int64, status: Int) {
        if stream == sessionStream {
            guard state == .handshake else { return }
            guard status == 200 else {
                fail(.rejected(status: status, "the front answered the session's CONNECT with \(status)"))
                return
            }
            state = .open
            Log.debug("carrier.h3.open", ["peer": peer.map { "\($0)" } ?? "", "tls": tlsDescription])
            delegate?.carrierConnected(self)
            // Body bytes that came with the 200 were announced before the carrier was open.
            core.processSoon.schedule()
            return
        }
        guard status != 200 else { return }
        h3?.reset(stream, code: 0x102)
        flowRefused(stream)
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
