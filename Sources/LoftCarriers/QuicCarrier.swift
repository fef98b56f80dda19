import LoftCore
import LoftHTTP
import LoftQUIC

/// The ALPN of the quic carrier.
let quicALPN = "loft"

/// The `quic` carrier: one loft session on the first bidirectional stream (id 0, the
/// client's) of a QUIC connection (ngtcp2 + GnuTLS, ALPN `loft`), each flow on a stream of its
/// own, UDP datagrams as QUIC datagrams. The connection, the client's socket and migration, the
/// flows and the carrier core are `QuicCarrierBase`'s; on the front the connection lives on the
/// listener's socket (`QuicListener`), which makes this carrier once the handshake chose `loft`.
final class QuicCarrier: QuicCarrierBase {
    init(client: CarrierClient, delegate: CarrierDelegate) {
        super.init(client: client, delegate: delegate, kind: .quic, alpn: quicALPN, limits: QuicLimits(), datagrams: true)
    }

    init(server entry: QuicServerConnection, listener: QuicListener, connection q: QuicConnection) {
        super.init(server: entry, listener: listener, connection: q, kind: .quic, datagrams: true)
    }

    /// Client: the session stream opens the carrier. Server: the carrier goes to the listener.
    override func connectionReady(_ c: QuicConnection) {
        if isServer {
            state = .open
            request = CarrierRequest(kind: kind, peer: peer, path: "", query: nil, headers: HTTPHeaders(), sessionID: nil)
            if let entry { listener?.accepted(entry) }
            return
        }
        guard let sid = c.openStream(), sid == sessionStream else {
            fail(.protocolError("cannot open the session stream"))
            return
        }
        state = .open
        Log.debug("carrier.quic.open", ["peer": peer.map { "\($0)" } ?? "", "tls": tlsDescription])
        delegate?.carrierConnected(self)
    }
}
