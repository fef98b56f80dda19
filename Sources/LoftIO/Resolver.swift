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
/// does by default. When resolv.conf changes (checked at most every `confCheckMs`, when a
/// name is resolved) later lookups go to a fresh c-ares channel that reads it again and the
/// cache is emptied; lookups already out finish on the old channel.
///
/// Completions run on the loop, never from inside `resolve`: IP literals and cached answers on
/// the next turn (`loop.soon`), the rest when their answer arrives or the tries time out.
/// Addresses come IPv4 first, then IPv6, each once; none when the name could not be resolved.
/// Answers are cached for their smallest TTL (at most an hour), failures (no such name, no
/// address, no answer in time) for `negativeTTLms`; at most `cacheEntries` names, the oldest entry evicted first. Lookups of a
/// name already being looked up join that lookup.
public final class Resolver {
    private let loop: EventLoop
    private let settings: ChannelSettings
    /// The channel new lookups go to.
    private var channel: Channel
    /// Channels replaced after a resolv.conf change, kept until their lookups end.
    private var retired: [Channel] = []
    /// How many channels are retired and still running (for tests).
    var retiredChannels: Int { retired.count }
    private var confStamp: FileStamp
    private var nextConfCheck: UInt64 = 0
    /// How often (at most) resolv.conf is checked for changes.
    public static let confCheckMs: UInt64 = 2000

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
    /// Times a changed resolv.conf was read again.
    public private(set) var confReloads: UInt64 = 0

    /// `servers`: "host:port" entries to ask instead of resolv.conf's (IPv6 hosts in
    /// brackets). `resolvConf`: the file read for servers, search domains and options.
    /// `serverPort`: the port of servers named without one (nil: 53). `timeoutMs`: the first
    /// try's timeout, doubled at each further try; `tries`: rounds over the servers (2000 ms
    /// and 2: an unanswered name gives up after 6 s).
    public init(loop: EventLoop, servers: [String]? = nil, resolvConf: String = "/etc/resolv.conf",
                serverPort: UInt16? = nil, timeoutMs: Int = 2000, tries: Int = 2,
                cacheEntries: Int = 1024, negativeTTLms: UInt64 = 5000) throws {
        self.loop = loop
        self.cacheEntries = max(0, cacheEntries)
        self.negativeTTLms = negativeTTLms
        settings = ChannelSettings(resolvConf: resolvConf, servers: servers?.joined(separator: ","),
                                   port: serverPort ?? 0, timeoutMs: Int32(clamping: timeoutMs),
                                   tries: Int32(clamping: tries))
        confStamp = FileStamp(resolvConf)
        channel = try Channel(loop: loop, settings)
        nextConfCheck = loop.now + Self.confCheckMs
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
        reloadIfConfChanged()
        let key = name.lowercased()
        if let addresses = cached(key) {
            deliverSoon([request], addresses)
            return request
        }
        if let lookup = inFlight[key] {
            lookup.waiters.append(request)
            return request
        }
        let lookup = Lookup(key: key, resolver: self, channel: channel, request: request)
        inFlight[key] = lookup
        lookupsStarted += 1
        channel.pending += 1
        // The lookup is retained until its result callback, which runs exactly once (maybe
        // during cares_lookup: an /etc/hosts entry).
        let context = Unmanaged.passRetained(lookup).toOpaque()
        // Host mode marks loft's own sockets (set after start-up began): c-ares's too.
        cares_set_mark(channel.pointer, Sockets.outboundMark)
        cares_lookup(channel.pointer, name, { context, result, detail, addresses, count, ttl in
            guard let context else { return }
            let lookup = Unmanaged<Lookup>.fromOpaque(context).takeRetainedValue()
            // Destroyed: the channel is being freed (the resolver went); nothing to tell.
            guard Int(result) != CARES_RESULT_DESTROYED else { return }
            lookup.channel?.pending -= 1
            guard let resolver = lookup.resolver else { return }
            var list = [IPAddress]()
            if let addresses, count > 0 {
                list = Resolver.ordered(UnsafeBufferPointer(start: addresses, count: Int(count)))
            }
            resolver.finish(lookup, result: result, detail: detail, addresses: list, ttl: ttl)
        }, context)
        channel.rearmTimer()
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
        // A retired channel is freed once its last lookup ended, outside c-ares's callback.
        if let ch = lookup.channel, ch.pending == 0, retired.contains(where: { $0 === ch }) {
            loop.soon { [weak self] in self?.retired.removeAll { $0 === ch && $0.pending == 0 } }
        }
    }

    /// Moves new lookups to a fresh channel when resolv.conf changed since the current one
    /// read it, and empties the cache (answers and failures may differ with other servers).
    private func reloadIfConfChanged() {
        guard loop.now >= nextConfCheck else { return }
        nextConfCheck = loop.now + Self.confCheckMs
        let stamp = FileStamp(settings.resolvConf)
        guard stamp != confStamp else { return }
        let fresh: Channel
        do { fresh = try Channel(loop: loop, settings) } catch {
            Log.warn("resolver.reload-failed", ["file": settings.resolvConf, "error": error])
            return
        }
        confStamp = stamp
        confReloads += 1
        Log.info("resolver.reloaded", ["file": settings.resolvConf])
        // Not inside a c-ares callback here: an idle channel is freed at once.
        if channel.pending > 0 { retired.append(channel) }
        channel = fresh
        cache.removeAll()
        insertions.removeAll()
        insertionsStart = 0
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
}

/// One name being looked up and the requests waiting for it.
private final class Lookup {
    let key: String
    weak var resolver: Resolver?
    /// Weak: the resolver owns its channels, and freeing one from inside its own callback (the
    /// last reference dropped there) would free c-ares under its own feet.
    weak var channel: Channel?
    var waiters: [ResolveRequest]

    init(key: String, resolver: Resolver, channel: Channel, request: ResolveRequest) {
        self.key = key
        self.resolver = resolver
        self.channel = channel
        waiters = [request]
    }
}

/// How every channel of a resolver is made.
private struct ChannelSettings {
    var resolvConf: String
    var servers: String?
    var port: UInt16
    var timeoutMs: Int32
    var tries: Int32
}

/// A file's identity and modification time (all zero when it cannot be read): a changed stamp
/// means a changed file.
private struct FileStamp: Equatable {
    var device: UInt64 = 0, inode: UInt64 = 0, size: Int64 = 0, seconds: Int = 0, nanoseconds: Int = 0

    init(_ path: String) {
        guard case .success(let st) = Syscall.status(path: path) else { return }
        device = st.device
        inode = st.inode
        size = st.size
        seconds = st.modifiedSeconds
        nanoseconds = st.modifiedNanoseconds
    }
}

/// One c-ares channel on the loop: the target of its socket callback (which also runs while the
/// channel is freed), the sockets it asked to be watched, and a timer at its next timeout.
private final class Channel {
    let loop: EventLoop
    private(set) var pointer: OpaquePointer!
    /// Lookups started on this channel whose result has not come yet.
    var pending = 0
    private var watched: [Int32: ResolverSocket] = [:]
    private var timer: TimerHandle?
    private var timerDue: UInt64 = 0

    private static let libraryStatus: Int32 = cares_library_init()

    init(loop: EventLoop, _ settings: ChannelSettings) throws {
        guard Self.libraryStatus == 0 else {
            throw ResolverError(description: "c-ares: \(String(cString: cares_error_text(Self.libraryStatus)))")
        }
        self.loop = loop
        var error: Int32 = 0
        let context = Unmanaged.passUnretained(self).toOpaque()
        let socketChanged: cares_socket_cb = { context, fd, readable, writable in
            guard let context else { return }
            Unmanaged<Channel>.fromOpaque(context).takeUnretainedValue()
                .update(fd, readable: readable != 0, writable: writable != 0)
        }
        pointer = settings.resolvConf.withCString { conf in
            if let servers = settings.servers {
                servers.withCString {
                    cares_channel_new(socketChanged, context, conf, $0, settings.port, settings.timeoutMs, settings.tries, &error)
                }
            } else {
                cares_channel_new(socketChanged, context, conf, nil, settings.port, settings.timeoutMs, settings.tries, &error)
            }
        }
        guard pointer != nil else {
            throw ResolverError(description: "c-ares: \(String(cString: cares_error_text(error)))")
        }
    }

    deinit {
        if let timer { loop.cancel(timer) }
        // Closes c-ares's sockets (each unregistered from the loop first: `update`); lookups
        // still out end as destroyed, without their completions.
        if let pointer { cares_channel_free(pointer) }
    }

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
            let socket = ResolverSocket(fd: fd, channel: self)
            watched[fd] = socket
            loop.register(fd, mask, socket)
        }
    }

    /// The loop saw `events` on one of this channel's sockets.
    func process(_ fd: Int32, _ events: UInt32) {
        let failed = events & (IOEvents.error | IOEvents.hangup) != 0
        let readable = failed || events & IOEvents.readable != 0
        let writable = failed || events & IOEvents.writable != 0
        cares_process(pointer, readable ? fd : -1, writable ? fd : -1)
        rearmTimer()
    }

    /// Keeps one loop timer at c-ares's next timeout (a timer due earlier is kept: it handles
    /// what is due and sets the next). None while no lookup is pending.
    func rearmTimer() {
        let ms = cares_timeout_ms(pointer)
        guard ms >= 0 else {
            if let timer { loop.cancel(timer) }
            timer = nil
            return
        }
        // One millisecond more: the loop's clock counts whole milliseconds, so a timer could
        // run up to one early; c-ares would then find nothing due and the timer be set again.
        let after = UInt64(ms) + 1
        let due = loop.currentTime + after
        if let timer {
            if timerDue <= due { return }
            loop.cancel(timer)
        }
        timerDue = due
        timer = loop.schedule(after: after) { [weak self] in
            guard let self else { return }
            self.timer = nil
            cares_process(self.pointer, -1, -1)
            self.rearmTimer()
        }
    }
}

/// The loop's handler for one c-ares socket.
private final class ResolverSocket: IOHandler {
    let fd: Int32
    weak var channel: Channel?

    init(fd: Int32, channel: Channel) {
        self.fd = fd
        self.channel = channel
    }

    func handleIO(_ events: UInt32) { channel?.process(fd, events) }
}
