import CAres
import LoftCore

/// A resolution in progress. After `cancel()` its completion never runs.
public final class ResolveRequest {
    private var completion: (([IPAddress]) -> Void)?

    init(_ completion: @escaping ([IPAddress]) -> Void) { self.completion = completion }

    /// True until the completion ran or the request was cancelled.
    public var isPending: Bool { completion != nil }

    /// The completion never runs (it is released at once). Cancelling twice, or after the
    /// completion ran, does nothing.
    public func cancel() { completion = nil }

    fileprivate func deliver(_ addresses: [IPAddress]) {
        guard let c = completion else { return }
        completion = nil
        c(addresses)
    }
}

public struct ResolverError: Error, CustomStringConvertible {
    public var description: String
}

/// The one name resolver of an event loop, on c-ares: its sockets are watched by the loop, its
/// timeouts are a loop timer, nothing blocks and no thread is involved. Reads /etc/hosts (at
/// each lookup) and then asks the servers of /etc/resolv.conf (or the ones given), as c-ares
/// does by default.
///
/// Completions run on the loop, never from inside `resolve`: IP literals and cached answers on
/// the next turn (`loop.soon`), the rest when their answer arrives or the tries time out.
/// Addresses come IPv4 first, then IPv6, each once; none when the name could not be resolved.
/// Answers are cached for their smallest TTL (at most an hour), failures for
/// `negativeTTLms`; at most `cacheEntries` names, the oldest entry evicted first. Lookups of a
/// name already being looked up join that lookup.
public final class Resolver {
    private let loop: EventLoop
    private let sockets: ResolverSockets
    private let channel: OpaquePointer
    private var timer: TimerHandle?
    private var timerDue: UInt64 = 0

    /// Names being looked up (lower-cased), with the requests waiting for them.
    private var inFlight: [String: Lookup] = [:]

    private struct Entry {
        var addresses: [IPAddress]
        var expires: UInt64
        var order: UInt64
    }
    private var cache: [String: Entry] = [:]
    /// Cache insertions, oldest first from `insertionsStart`; a record whose order no longer
    /// matches its entry's is stale (the entry was replaced or dropped) and is skipped.
    private var insertions: [(key: String, order: UInt64)] = []
    private var insertionsStart = 0
    private var nextOrder: UInt64 = 0
    private let cacheEntries: Int
    private let negativeTTLms: UInt64
    /// Answers are kept no longer than this, whatever their TTL.
    public static let maximumTTLms: UInt64 = 3_600_000

    /// c-ares lookups started (names that were neither literals, cached nor already in flight).
    public private(set) var lookupsStarted: UInt64 = 0

    private static let libraryStatus: Int32 = cares_library_init()

    /// `servers`: "host:port" entries to ask instead of /etc/resolv.conf's (IPv6 hosts in
    /// brackets). `timeoutMs`: the first try's timeout, doubled at each further try; `tries`:
    /// rounds over the servers (2000 ms and 2: an unanswered name gives up after 6 s).
    public init(loop: EventLoop, servers: [String]? = nil, timeoutMs: Int = 2000, tries: Int = 2,
                cacheEntries: Int = 1024, negativeTTLms: UInt64 = 5000) throws {
        guard Self.libraryStatus == 0 else {
            throw ResolverError(description: "c-ares: \(String(cString: cares_error_text(Self.libraryStatus)))")
        }
        self.loop = loop
        self.cacheEntries = max(0, cacheEntries)
        self.negativeTTLms = negativeTTLms
        sockets = ResolverSockets(loop: loop)
        var error: Int32 = 0
        let context = Unmanaged.passUnretained(sockets).toOpaque()
        let socketChanged: cares_socket_cb = { context, fd, readable, writable in
            guard let context else { return }
            Unmanaged<ResolverSockets>.fromOpaque(context).takeUnretainedValue()
                .update(fd, readable: readable != 0, writable: writable != 0)
        }
        let made: OpaquePointer? = if let servers {
            servers.joined(separator: ",").withCString {
                cares_channel_new(socketChanged, context, $0, Int32(clamping: timeoutMs), Int32(clamping: tries), &error)
            }
        } else {
            cares_channel_new(socketChanged, context, nil, Int32(clamping: timeoutMs), Int32(clamping: tries), &error)
        }
        guard let made else {
            throw ResolverError(description: "c-ares: \(String(cString: cares_error_text(error)))")
        }
        channel = made
        sockets.resolver = self
    }

    deinit {
        if let timer { loop.cancel(timer) }
        // Closes c-ares's sockets (each unregistered from the loop first); lookups in flight
        // end without their completions.
        cares_channel_free(channel)
    }

    /// Resolves `name` (a host name, or an IP literal: IPv6 with or without brackets) and calls
    /// `completion` on the loop with its addresses, IPv4 first; none when it cannot be
    /// resolved. Never calls it from inside this call. Keep the request to cancel it.
    @discardableResult
    public func resolve(_ name: String, _ completion: @escaping ([IPAddress]) -> Void) -> ResolveRequest {
        let request = ResolveRequest(completion)
        if let literal = Self.literal(name) {
            deliverSoon([request], [literal])
            return request
        }
        guard Self.isLookupName(name) else {
            deliverSoon([request], [])
            return request
        }
        let key = name.lowercased()
        if let addresses = cached(key) {
            deliverSoon([request], addresses)
            return request
        }
        if let lookup = inFlight[key] {
            lookup.waiters.append(request)
            return request
        }
        let lookup = Lookup(key: key, resolver: self, request: request)
        inFlight[key] = lookup
        lookupsStarted += 1
        // The lookup is retained until its result callback, which runs exactly once (maybe
        // during cares_lookup: an /etc/hosts entry).
        let context = Unmanaged.passRetained(lookup).toOpaque()
        // Host mode marks loft's own sockets (set after start-up began): c-ares's too.
        cares_set_mark(channel, Sockets.outboundMark)
        cares_lookup(channel, name, { context, result, detail, addresses, count, ttl in
            guard let context else { return }
            let lookup = Unmanaged<Lookup>.fromOpaque(context).takeRetainedValue()
            guard Int(result) != CARES_RESULT_DESTROYED, let resolver = lookup.resolver else { return }
            var list = [IPAddress]()
            if let addresses, count > 0 {
                list = Resolver.ordered(UnsafeBufferPointer(start: addresses, count: Int(count)))
            }
            resolver.finish(lookup, result: result, detail: detail, addresses: list, ttl: ttl)
        }, context)
        rearmTimer()
        return request
    }

    /// An IP literal, with or without brackets.
    static func literal(_ name: String) -> IPAddress? {
        if name.hasPrefix("[") && name.hasSuffix("]") && name.count >= 2 {
            return IPAddress(String(name.dropFirst().dropLast()))
        }
        return IPAddress(name)
    }

    /// What c-ares may be asked about: not empty, at most 254 bytes (a trailing dot included),
    /// no NUL (C would cut the name there), no brackets (only IPv6 literals have them).
    static func isLookupName(_ name: String) -> Bool {
        let bytes = name.utf8
        return !bytes.isEmpty && bytes.count <= 254 && !bytes.contains(0) && !bytes.contains(UInt8(ascii: "["))
    }

    /// The IPv4 addresses, then the IPv6 ones, each once, in the order given.
    static func ordered(_ addresses: UnsafeBufferPointer<cares_address>) -> [IPAddress] {
        var v4: [IPAddress] = [], v6: [IPAddress] = []
        for var a in addresses {
            switch a.family {
            case 4:
                let ip = withUnsafeBytes(of: &a.bytes) { IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: $0[0..<4])) }
                if !v4.contains(ip) { v4.append(ip) }
            case 6:
                let ip = withUnsafeBytes(of: &a.bytes) { IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: $0[0..<16])) }
                if !v6.contains(ip) { v6.append(ip) }
            default:
                continue
            }
        }
        return v4 + v6
    }

    private func deliverSoon(_ requests: [ResolveRequest], _ addresses: [IPAddress]) {
        loop.soon { for r in requests { r.deliver(addresses) } }
    }

    /// A lookup ended: cache what it found (or that it found nothing), then hand it to every
    /// request still waiting.
    private func finish(_ lookup: Lookup, result: Int32, detail: Int32, addresses: [IPAddress], ttl: Int32) {
        if inFlight[lookup.key] === lookup { inFlight[lookup.key] = nil }
        if addresses.isEmpty {
            Log.debug("resolve.failed", ["name": lookup.key, "error": String(cString: cares_error_text(detail))])
            store(lookup.key, [], lifetime: negativeTTLms)
        } else {
            store(lookup.key, addresses, lifetime: min(UInt64(max(ttl, 0)) * 1000, Self.maximumTTLms))
        }
        deliverSoon(lookup.waiters, addresses)
    }

    // MARK: cache

    private func cached(_ key: String) -> [IPAddress]? {
        guard let e = cache[key] else { return nil }
        if e.expires > loop.now { return e.addresses }
        cache[key] = nil
        return nil
    }

    private func store(_ key: String, _ addresses: [IPAddress], lifetime: UInt64) {
        guard lifetime > 0, cacheEntries > 0 else { return }
        if cache[key] == nil {
            while cache.count >= cacheEntries { evictOldest() }
        }
        nextOrder += 1
        cache[key] = Entry(addresses: addresses, expires: loop.now + lifetime, order: nextOrder)
        insertions.append((key, nextOrder))
        // Drop the stale records once they outnumber the entries: amortised O(1) per insert.
        if insertions.count - insertionsStart > 2 * cacheEntries {
            insertions = insertions[insertionsStart...].filter { cache[$0.key]?.order == $0.order }
            insertionsStart = 0
        }
    }

    private func evictOldest() {
        while insertionsStart < insertions.count {
            let (key, order) = insertions[insertionsStart]
            insertionsStart += 1
            if cache[key]?.order == order {
                cache[key] = nil
                return
            }
        }
        // No live record left: cannot happen while entries exist, but never loop forever.
        cache.removeAll()
    }

    // MARK: c-ares on the loop

    /// The loop saw `events` on one of c-ares's sockets.
    fileprivate func process(_ fd: Int32, _ events: UInt32) {
        let failed = events & (IOEvents.error | IOEvents.hangup) != 0
        let readable = failed || events & IOEvents.readable != 0
        let writable = failed || events & IOEvents.writable != 0
        cares_process(channel, readable ? fd : -1, writable ? fd : -1)
        rearmTimer()
    }

    /// Keeps one loop timer at c-ares's next timeout (a timer due earlier is kept: it handles
    /// what is due and sets the next). None while no lookup is pending.
    private func rearmTimer() {
        let ms = cares_timeout_ms(channel)
        guard ms >= 0 else {
            if let timer { loop.cancel(timer) }
            timer = nil
            return
        }
        // One millisecond more: the loop's clock is read once per turn, so a timer can run a
        // little early; c-ares then finds nothing due and the timer is set again.
        let after = UInt64(ms) + 1
        let due = loop.now + after
        if let timer {
            if timerDue <= due { return }
            loop.cancel(timer)
        }
        timerDue = due
        timer = loop.schedule(after: after) { [weak self] in
            guard let self else { return }
            self.timer = nil
            cares_process(self.channel, -1, -1)
            self.rearmTimer()
        }
    }
}

/// One name being looked up and the requests waiting for it.
private final class Lookup {
    let key: String
    weak var resolver: Resolver?
    var waiters: [ResolveRequest]

    init(key: String, resolver: Resolver, request: ResolveRequest) {
        self.key = key
        self.resolver = resolver
        waiters = [request]
    }
}

/// c-ares's sockets as the loop watches them; the target of c-ares's socket callback, which
/// also runs while the channel is freed (from the resolver's deinit), so it is not the resolver.
private final class ResolverSockets {
    let loop: EventLoop
    weak var resolver: Resolver?
    private var watched: [Int32: ResolverSocket] = [:]

    init(loop: EventLoop) { self.loop = loop }

    /// c-ares wants `fd` watched for reading and/or writing, or (neither) is about to close it.
    func update(_ fd: Int32, readable: Bool, writable: Bool) {
        if !readable && !writable {
            if watched.removeValue(forKey: fd) != nil { loop.unregister(fd) }
            return
        }
        let mask = (readable ? IOEvents.readable : 0) | (writable ? IOEvents.writable : 0)
        if watched[fd] != nil {
            loop.modify(fd, mask)
        } else {
            let socket = ResolverSocket(fd: fd, owner: self)
            watched[fd] = socket
            loop.register(fd, mask, socket)
        }
    }
}

private final class ResolverSocket: IOHandler {
    let fd: Int32
    weak var owner: ResolverSockets?

    init(fd: Int32, owner: ResolverSockets) {
        self.fd = fd
        self.owner = owner
    }

    func handleIO(_ events: UInt32) { owner?.resolver?.process(fd, events) }
}
