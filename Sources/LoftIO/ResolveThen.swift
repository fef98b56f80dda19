import LoftCore

extension Resolver {
    /// Resolve-then-connect: `name`'s first address that `allow` passes (nil: any), with
    /// `port`, or why there is none: `.resolveFailed` (the name has no address) or
    /// `.notAllowed` (none passes). Like `resolve(_:_:)`, `then` runs on the loop, never inside
    /// this call; keep the request to cancel it. The one place a destination given as a name
    /// becomes an endpoint (the direct outbound's streams and datagrams, VLESS's datagrams).
    @discardableResult
    public func resolve(_ name: String, port: UInt16, allow: ((IPAddress) -> Bool)? = nil,
                        _ then: @escaping (Result<Endpoint, FlowFailure>) -> Void) -> ResolveRequest {
        resolve(name) { addresses in
            let picked = allow.map { addresses.first(where: $0) } ?? addresses.first
            if let picked { then(.success(Endpoint(picked, port))) }
            else { then(.failure(addresses.isEmpty ? .resolveFailed : .notAllowed)) }
        }
    }
}
