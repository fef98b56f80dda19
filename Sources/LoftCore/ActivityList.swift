/// An entry of an `ActivityList`: its neighbours, kept by the list.
public protocol ActivityListed: AnyObject {
    var older: Self? { get set }
    var newer: Self? { get set }
}

/// Entries in the order of their last activity, least recent first: O(1) to move one to the
/// newest end, to remove one and to find the oldest (the one evicted at a cap: the netstack's
/// flows and associations, the SOCKS5 server's clients still in their handshake). The
/// list does not keep its entries alive: whoever holds them removes them before letting go.
public struct ActivityList<T: ActivityListed> {
    @inlinable public init() {}

    // Inlinable, so a module that lists its own final class gets the list specialized for it
    // (its neighbours read and written in place, not through protocol witnesses that return a
    // retained reference each).
    @inlinable public var oldest: T? { first }
    @usableFromInline internal unowned(unsafe) var first: T?
    @usableFromInline internal unowned(unsafe) var newest: T?

    @inlinable
    public mutating func append(_ x: T) {
        x.older = newest
        x.newer = nil
        newest?.newer = x
        newest = x
        if first == nil { first = x }
    }

    @inlinable
    public mutating func remove(_ x: T) {
        if let n = x.newer { n.older = x.older } else if newest === x { newest = x.older }
        if let o = x.older { o.newer = x.newer } else if first === x { first = x.newer }
        x.older = nil
        x.newer = nil
    }

    /// `x` (in the list) was active: it becomes the newest.
    @inlinable
    public mutating func touch(_ x: T) {
        guard newest !== x else { return }
        remove(x)
        append(x)
    }
}
