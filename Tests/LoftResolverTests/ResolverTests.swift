import LoftCore
@testable import LoftIO
import LoftTestSupport
import XCTest

/// The loop's resolver against a DNS server of the test's own on loopback, on a real loop.
final class ResolverTests: XCTestCase {
    private var loop: EventLoop!
    private var dns: DNSResponder!

    override func setUpWithError() throws {
        Log.threshold = .warn
        loop = try EventLoop()
        dns = try DNSResponder(loop: loop)
    }

    override func tearDown() {
        dns = nil
        loop = nil
    }

    private func resolver(timeoutMs: Int = 300, tries: Int = 2, cacheEntries: Int = 1024,
                          negativeTTLms: UInt64 = 5000) throws -> Resolver {
        try Resolver(loop: loop, servers: [dns.server], timeoutMs: timeoutMs, tries: tries,
                     cacheEntries: cacheEntries, negativeTTLms: negativeTTLms)
    }

    /// The test's loop and DNS server on a virtual clock instead (for waits that are the
    /// resolver's own lifetimes, not c-ares's timeouts, which keep c-ares's real clock).
    private func useVirtualClock() throws {
        dns = nil
        loop = try EventLoop(clock: VirtualClock())
        dns = try DNSResponder(loop: loop)
    }

    /// A step that waits `ms` milliseconds (on the loop's clock).
    private func pause(_ ms: UInt64) -> () -> Bool {
        var until: UInt64?
        return {
            if until == nil { until = self.loop.currentTime + ms }
            return self.loop.currentTime >= until!
        }
    }

    /// Collects the answers of several resolutions.
    private final class Answers {
        var byTag: [String: [IPAddress]] = [:]
        func has(_ tag: String) -> Bool { byTag[tag] != nil }
    }

    private func ips(_ texts: String...) -> [IPAddress] { texts.map { IPAddress($0)! } }

    func testAnswersComeIPv4FirstEachOnce() throws {
        dns.records["both.loft.test"] = .init(v4: ["192.0.2.1", "192.0.2.2", "192.0.2.1"],
                                              v6: ["2001:db8::1", "2001:db8::2", "2001:db8::1"])
        dns.records["six.loft.test"] = .init(v6: ["2001:db8::6"])
        let r = try resolver()
        let a = Answers()
        let failed = loop.run(steps: [
            {
                r.resolve("both.loft.test") { a.byTag["both"] = $0 }
                r.resolve("six.loft.test") { a.byTag["six"] = $0 }
                return true
            },
            { a.has("both") && a.has("six") },
        ], seconds: 5)
        XCTAssertNil(failed)
        XCTAssertEqual(a.byTag["both"], ips("192.0.2.1", "192.0.2.2", "2001:db8::1", "2001:db8::2"))
        XCTAssertEqual(a.byTag["six"], ips("2001:db8::6"))
        XCTAssertEqual(dns.count("both.loft.test", "A"), 1)
        XCTAssertEqual(dns.count("both.loft.test", "AAAA"), 1)
    }

    /// On virtual time: the TTL runs out on the loop's clock.
    func testACachedAnswerIsUsedWithinItsTTLAndAskedAgainAfter() throws {
        try useVirtualClock()
        dns.records["short.loft.test"] = .init(v4: ["192.0.2.10"], ttl: 1)
        let r = try resolver()
        let a = Answers()
        var askedAfterCached = -1
        let failed = loop.run(steps: [
            { r.resolve("short.loft.test") { a.byTag["first"] = $0 }; return true },
            { a.has("first") },
            { r.resolve("SHORT.loft.test") { a.byTag["cached"] = $0 }; return true },
            { a.has("cached") },
            { askedAfterCached = self.dns.count("short.loft.test", "A"); return true },
            pause(1200),
            { r.resolve("short.loft.test") { a.byTag["expired"] = $0 }; return true },
            { a.has("expired") },
        ], seconds: 8)
        XCTAssertNil(failed)
        XCTAssertEqual(a.byTag["first"], ips("192.0.2.10"))
        XCTAssertEqual(a.byTag["cached"], ips("192.0.2.10"))
        XCTAssertEqual(askedAfterCached, 1, "the cached answer was used")
        XCTAssertEqual(a.byTag["expired"], ips("192.0.2.10"))
        XCTAssertEqual(dns.count("short.loft.test", "A"), 2, "asked again once the TTL ran out")
        XCTAssertEqual(r.lookupsStarted, 2)
    }

    func testConcurrentLookupsOfOneNameShareOneQuery() throws {
        dns.records["shared.loft.test"] = .init(v4: ["192.0.2.20"], v6: ["2001:db8::20"])
        let r = try resolver()
        let a = Answers()
        let failed = loop.run(steps: [
            {
                r.resolve("shared.loft.test") { a.byTag["one"] = $0 }
                r.resolve("Shared.Loft.Test") { a.byTag["two"] = $0 }
                r.resolve("shared.loft.test") { a.byTag["three"] = $0 }
                return true
            },
            { a.has("one") && a.has("two") && a.has("three") },
        ], seconds: 5)
        XCTAssertNil(failed)
        for tag in ["one", "two", "three"] { XCTAssertEqual(a.byTag[tag], ips("192.0.2.20", "2001:db8::20"), tag) }
        XCTAssertEqual(dns.count("shared.loft.test", "A"), 1)
        XCTAssertEqual(dns.count("shared.loft.test", "AAAA"), 1)
        XCTAssertEqual(r.lookupsStarted, 1)
    }

    /// On virtual time: the wait for a callback that must not come is the loop's.
    func testACancelledRequestNeverCallsBack() throws {
        try useVirtualClock()
        dns.records["cancel.loft.test"] = .init(v4: ["192.0.2.30"])
        let r = try resolver()
        let a = Answers()
        var cancelledCalls = 0
        var pendingAfterCancel = true
        let failed = loop.run(steps: [
            {
                // Cancelled while the query is out, while a literal and while a cached answer
                // wait for the next turn; the uncancelled request shows when the answer came.
                let lookup = r.resolve("cancel.loft.test") { _ in cancelledCalls += 1 }
                r.resolve("cancel.loft.test") { a.byTag["kept"] = $0 }
                let literal = r.resolve("192.0.2.31") { _ in cancelledCalls += 1 }
                lookup.cancel()
                literal.cancel()
                pendingAfterCancel = lookup.isPending || literal.isPending
                return true
            },
            { a.has("kept") },
            {
                let cached = r.resolve("cancel.loft.test") { _ in cancelledCalls += 1 }
                cached.cancel()
                return true
            },
            pause(200),
        ], seconds: 5)
        XCTAssertNil(failed)
        XCTAssertEqual(a.byTag["kept"], ips("192.0.2.30"))
        XCTAssertEqual(cancelledCalls, 0)
        XCTAssertFalse(pendingAfterCancel)
    }

    func testASilentServerGivesNothingWithinTheTimeoutAndTheLoopKeepsTurning() throws {
        dns.silent = true
        // 200 ms, then 400 ms: gives up after about 600 ms.
        let r = try resolver(timeoutMs: 200, tries: 2)
        var result: [IPAddress]?
        var startedAt: UInt64 = 0
        var endedAt: UInt64 = 0
        // Another timer on the loop: the longest gap between its runs shows whether anything
        // held the loop.
        var ticks = 0
        var lastTick: UInt64 = 0
        var longestGap: UInt64 = 0
        func tick() {
            let now = monotonicMilliseconds()
            if lastTick != 0 { longestGap = max(longestGap, now - lastTick) }
            lastTick = now
            ticks += 1
            loop.schedule(after: 5) { tick() }
        }
        let failed = loop.run(steps: [
            {
                tick()
                startedAt = monotonicMilliseconds()
                r.resolve("silent.loft.test") { result = $0; endedAt = monotonicMilliseconds() }
                return true
            },
            { result != nil },
        ], seconds: 6)
        XCTAssertNil(failed)
        XCTAssertEqual(result, [])
        let took = endedAt - startedAt
        XCTAssertGreaterThanOrEqual(took, 500, "both tries waited")
        XCTAssertLessThan(took, 2000, "gave up after c-ares's tries")
        XCTAssertEqual(dns.count("silent.loft.test", "A"), 2, "asked once per try")
        XCTAssertGreaterThan(ticks, 20)
        XCTAssertLessThan(longestGap, 100, "the loop was never held")
    }

    /// On virtual time: the failure's lifetime runs out on the loop's clock.
    func testNXDOMAINGivesNothingAndIsCachedBriefly() throws {
        try useVirtualClock()
        let r = try resolver(negativeTTLms: 1000)
        let a = Answers()
        var askedAfterCached = -1
        let failed = loop.run(steps: [
            { r.resolve("missing.loft.test") { a.byTag["first"] = $0 }; return true },
            { a.has("first") },
            { r.resolve("missing.loft.test") { a.byTag["cached"] = $0 }; return true },
            { a.has("cached") },
            { askedAfterCached = self.dns.count("missing.loft.test", "A"); return true },
            pause(1200),
            { r.resolve("missing.loft.test") { a.byTag["expired"] = $0 }; return true },
            { a.has("expired") },
        ], seconds: 6)
        XCTAssertNil(failed)
        XCTAssertEqual(a.byTag["first"], [])
        XCTAssertEqual(a.byTag["cached"], [])
        XCTAssertEqual(a.byTag["expired"], [])
        XCTAssertEqual(askedAfterCached, 1, "the failure was cached")
        XCTAssertEqual(dns.count("missing.loft.test", "A"), 2, "asked again once the failure expired")
    }

    func testLiteralsNeverQueryAndNeverCompleteInsideTheCall() throws {
        let r = try resolver()
        let a = Answers()
        var synchronous = false
        let failed = loop.run(steps: [
            {
                r.resolve("192.0.2.40") { a.byTag["v4"] = $0 }
                r.resolve("2001:db8::40") { a.byTag["v6"] = $0 }
                r.resolve("[2001:db8::41]") { a.byTag["bracketed"] = $0 }
                r.resolve("[not-an-address]") { a.byTag["bad"] = $0 }
                synchronous = !a.byTag.isEmpty
                return true
            },
            { a.byTag.count == 4 },
        ], seconds: 5)
        XCTAssertNil(failed)
        XCTAssertFalse(synchronous)
        XCTAssertEqual(a.byTag["v4"], ips("192.0.2.40"))
        XCTAssertEqual(a.byTag["v6"], ips("2001:db8::40"))
        XCTAssertEqual(a.byTag["bracketed"], ips("2001:db8::41"))
        XCTAssertEqual(a.byTag["bad"], [])
        XCTAssertEqual(dns.totalQuestions, 0)
        XCTAssertEqual(r.lookupsStarted, 0)
    }

    /// /etc/hosts is read before any server is asked ("localhost" is in every hosts file, and
    /// c-ares answers it without a server even when it is not).
    func testHostsFileNamesAreAnsweredWithoutAServer() throws {
        let r = try resolver()
        var result: [IPAddress]?
        var synchronous = false
        let failed = loop.run(steps: [
            {
                r.resolve("localhost") { result = $0 }
                synchronous = result != nil
                return true
            },
            { result != nil },
        ], seconds: 5)
        XCTAssertNil(failed)
        XCTAssertFalse(synchronous)
        XCTAssertEqual(result?.first, IPAddress("127.0.0.1"))
        XCTAssertEqual(dns.totalQuestions, 0)
    }

    /// A name of /etc/hosts other than localhost (which c-ares never sends to a server anyway)
    /// comes from the file, and no server is asked.
    func testOtherHostsFileNamesComeFromTheFile() throws {
        var entry: (name: String, address: IPAddress)?
        if let f = fopen("/etc/hosts", "r") {
            defer { fclose(f) }
            var line = [CChar](repeating: 0, count: 1024)
            while entry == nil, fgets(&line, Int32(line.count), f) != nil {
                let bytes = line.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }
                let text = String(decoding: bytes, as: UTF8.self).split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)[0]
                let fields = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" })
                guard fields.count >= 2, let a = IPAddress(String(fields[0])), a.isIPv4 else { continue }
                if let name = fields.dropFirst().first(where: { !$0.lowercased().hasPrefix("localhost") }) {
                    entry = (String(name), a)
                }
            }
        }
        guard let entry else { throw XCTSkip("/etc/hosts has no IPv4 name but localhost") }
        let r = try resolver()
        var result: [IPAddress]?
        let failed = loop.run(steps: [
            { r.resolve(entry.name) { result = $0 }; return true },
            { result != nil },
        ], seconds: 5)
        XCTAssertNil(failed)
        XCTAssertTrue(result?.contains(entry.address) == true, "\(entry.name): \(String(describing: result))")
        XCTAssertEqual(dns.totalQuestions, 0)
    }

    /// A record claiming more bytes than the answer holds: no address, no crash.
    func testAMalformedAnswerGivesNothing() throws {
        dns.records["broken.loft.test"] = .init(v4: ["192.0.2.50"], v6: ["2001:db8::50"])
        dns.malformed = ["broken.loft.test"]
        dns.records["fine.loft.test"] = .init(v4: ["192.0.2.51"])
        let r = try resolver(timeoutMs: 200, tries: 2)
        let a = Answers()
        let failed = loop.run(steps: [
            {
                r.resolve("broken.loft.test") { a.byTag["broken"] = $0 }
                r.resolve("fine.loft.test") { a.byTag["fine"] = $0 }
                return true
            },
            { a.has("broken") && a.has("fine") },
        ], seconds: 5)
        XCTAssertNil(failed)
        XCTAssertEqual(a.byTag["broken"], [])
        XCTAssertEqual(a.byTag["fine"], ips("192.0.2.51"))
        XCTAssertGreaterThanOrEqual(dns.count("broken.loft.test", "A"), 1)
    }

    /// A full cache evicts its oldest entry.
    func testAFullCacheEvictsTheOldestEntry() throws {
        for n in ["one", "two", "three"] { dns.records["\(n).loft.test"] = .init(v4: ["192.0.2.60"]) }
        let r = try resolver(cacheEntries: 2)
        let a = Answers()
        func resolve(_ name: String, _ tag: String) -> [() -> Bool] {
            [{ r.resolve("\(name).loft.test") { a.byTag[tag] = $0 }; return true }, { a.has(tag) }]
        }
        let failed = loop.run(steps: resolve("one", "1") + resolve("two", "2") + resolve("three", "3")
                               + resolve("three", "3 again") + resolve("one", "1 again"), seconds: 5)
        XCTAssertNil(failed)
        XCTAssertEqual(dns.count("three.loft.test", "A"), 1, "the newest entry stayed")
        XCTAssertEqual(dns.count("one.loft.test", "A"), 2, "the oldest entry was evicted")
        XCTAssertEqual(a.byTag["1 again"], ips("192.0.2.60"))
    }

    /// Descriptors this process has open.
    private func openDescriptors() -> Int {
        guard let dir = opendir("/proc/self/fd") else { return -1 }
        defer { closedir(dir) }
        var n = 0
        while readdir(dir) != nil { n += 1 }
        return n
    }

    /// A resolver dropped with a lookup in flight closes its socket and never calls back.
    func testDroppingTheResolverEndsItsLookups() throws {
        dns.silent = true
        let before = openDescriptors()
        var r: Resolver? = try resolver(timeoutMs: 200, tries: 2)
        var calls = 0
        var during = 0
        var after = 0
        let failed = loop.run(steps: [
            { r?.resolve("dropped.loft.test") { _ in calls += 1 }; return true },
            { self.dns.count("dropped.loft.test", "A") == 1 },
            { during = self.openDescriptors(); r = nil; after = self.openDescriptors(); return true },
            pause(900),
        ], seconds: 5)
        XCTAssertNil(failed)
        XCTAssertEqual(calls, 0)
        XCTAssertGreaterThan(during, before, "the lookup had a socket open")
        XCTAssertEqual(after, before, "its socket was closed with the resolver")
        XCTAssertEqual(dns.count("dropped.loft.test", "A"), 1, "nothing was retried after the resolver went")
    }
}

/// A changed resolv.conf is read again: later lookups ask the servers it names now, and a
/// lookup already out on the old channel still ends.
final class ResolverReloadTests: XCTestCase {
    func testAChangedResolvConfIsReadAgain() throws {
        Log.threshold = .warn
        let loop = try EventLoop()
        let first = try DNSResponder(loop: loop)
        // The same port on another loopback address: resolv.conf names servers without a port.
        let second = try DNSResponder(loop: loop, address: IPAddress("127.0.0.2")!, port: first.port)
        first.records["moved.loft.test"] = .init(v4: ["192.0.2.70"])
        second.records["moved.loft.test"] = .init(v4: ["192.0.2.71"])
        first.silentNames = ["slow.loft.test"]
        let path = "/tmp/loft-resolver-test-\(getpid()).conf"
        defer { unlink(path) }
        func write(_ text: String) {
            let f = fopen(path, "w")!
            fputs(text, f)
            fclose(f)
        }
        write("nameserver 127.0.0.1\n")
        // 3 s: the slow lookup is still out on the old channel when the change is seen.
        let r = try Resolver(loop: loop, resolvConf: path, serverPort: first.port, timeoutMs: 3000, tries: 1)
        var before: [IPAddress]?
        var slow: [IPAddress]?
        var retiredWhileSlow = -1
        var after: [IPAddress]?
        var pause: UInt64 = 0
        let failed = loop.run(steps: [
            {
                r.resolve("moved.loft.test") { before = $0 }
                r.resolve("slow.loft.test") { slow = $0 }
                return true
            },
            { before != nil },
            {
                write("# moved\nnameserver 127.0.0.2\n")
                pause = monotonicMilliseconds() + Resolver.confCheckMs + 100
                return true
            },
            { monotonicMilliseconds() >= pause },
            { r.resolve("moved.loft.test") { after = $0 }; return true },
            { after != nil },
            { retiredWhileSlow = r.retiredChannels; return true },
            { slow != nil },
            { r.retiredChannels == 0 },
        ], seconds: 8)
        XCTAssertNil(failed)
        XCTAssertEqual(before, [IPAddress("192.0.2.70")!])
        XCTAssertEqual(after, [IPAddress("192.0.2.71")!], "the cache was emptied and the new server asked")
        XCTAssertEqual(r.confReloads, 1)
        XCTAssertEqual(first.count("moved.loft.test", "A"), 1)
        XCTAssertEqual(second.count("moved.loft.test", "A"), 1)
        XCTAssertEqual(slow, [], "the old channel timed its lookup out")
        XCTAssertEqual(retiredWhileSlow, 1, "the old channel was kept while its lookup was out")
        XCTAssertEqual(second.count("slow.loft.test", "A"), 0)
    }
}
