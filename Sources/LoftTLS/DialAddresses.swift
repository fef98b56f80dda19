import LoftCore

/// The addresses of a front's name, dialled one after the other in the resolver's order
/// (IPv4 first): when one fails the next is tried, and when none is left the dial fails with
/// the last one's error. TCP carriers (TLSConnection: a refused or failed connect) and QUIC
/// carriers (QuicCarrier: a socket error or no handshake in time) go through it.
package struct DialAddresses {
    private var rest: [Endpoint]
    /// Why the last address failed ("no address" before any).
    package private(set) var lastError = "no address"

    package init(_ addresses: [Endpoint]) { rest = addresses }

    /// Addresses not tried yet.
    package var remaining: Int { rest.count }

    /// The next address to try, after recording why the one before failed; nil when none is left.
    package mutating func next(failed error: String? = nil) -> Endpoint? {
        if let error { lastError = error }
        return rest.isEmpty ? nil : rest.removeFirst()
    }
}
