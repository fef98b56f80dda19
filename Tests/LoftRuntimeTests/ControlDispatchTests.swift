import Glibc
import LoftCapture
import LoftCarriers
import LoftConfig
import LoftControl
import LoftCore
import LoftIO
import LoftNetstack
import LoftOutbounds
import LoftRouting
import LoftRuntime
import LoftTLS
import LoftTestSupport
import XCTest

/// The running loft's control dispatch (`Runtime.handle`), driven with the request lines the
/// control socket hands it, against a runtime of real parts (its config read from a file, the
/// router, a netstack with one input) on a loop with a virtual clock; the outbounds are the
/// tests' fake, except a real holder and a real sstp outbound for `path-changed`.
final class ControlDispatchTests: XCTestCase {
    var dir = ""

    override func setUp() {
        Log.threshold = .error
        var template = Array("/tmp/loft-runtime-tests.XXXXXX".utf8CString)
        dir = String(cString: mkdtemp(&template)!)
    }

    override func tearDown() {
        for name in ["loft.yaml", "stderr.log"] { unlink(dir + "/" + name) }
        rmdir(dir)
    }

    static func yaml(rules: [String], outbounds: String = "  - { name: alt, type: direct }", socks5: String = "off",
                     control: String) -> String {
        """
        control: \(control)
        socks5: \(socks5)
        bridge: off
        outbounds:
        \(outbounds)
        rules:
        \(rules.map { "  - " + $0 }.joined(separator: "\n"))
        default: direct

        """
    }

    static let twoRules = ["{ action: drop, to: [198.18.99.0/24] }", "{ action: via, outbound: alt, network: udp, ports: [53] }"]

    /// The file as `loft reload` will find it.
    func write(_ text: String) {
        let fd = open(dir + "/loft.yaml", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        var bytes = Array(text.utf8)
        XCTAssertEqual(Glibc.write(fd, &bytes, bytes.count), bytes.count)
        close(fd)
    }

    /// A runtime as `loft run` assembles it, from the file (written first) or, `fromFile` false,
    /// from the same text with no file to reload.
    final class Fixture {
        let loop: EventLoop
        let direct = TestOutbound(name: "direct", type: "direct")
        let alt = TestOutbound(name: "alt", type: "direct")
        let writer = Collector()
        let runtime: Runtime
        let netstack: Netstack
        let input: Int

        final class Collector: PacketWriter {
            var packets: [[UInt8]] = []
            func writePacket(_ packet: UnsafeRawBufferPointer, segmentSize: Int) { packets.append(Array(packet)) }
        }

        init(path: String?, text: String) throws {
            loop = try EventLoop(clock: VirtualClock())
            let config: Configuration
            if let path { config = try ConfigLoader.load(path: path) } else { config = try ConfigLoader.parse(text, file: "inline.yaml") }
            runtime = Runtime(config: config, configPath: path, loop: loop, version: "9.9.9-test")
            runtime.outbounds = ["direct": direct, "alt": alt]
            let router = try Router(rules: config.rules.map(Rule.init), defaultAction: Rule.Action(config.defaultAction),
                                    outbounds: runtime.outbounds)
            runtime.router = router
            netstack = Netstack(loop: loop, router: router, settings: Netstack.Settings())
            runtime.netstack = netstack
            input = netstack.addInput(mtu: 1500, writer: writer)
            loop.timerHook = { [weak netstack] in netstack?.runTimers() ?? 1000 }
            loop.addAfterEvents { [weak netstack] in netstack?.afterEvents() }
        }

        func handle(_ line: String) -> Result<String, ControlServer.ControlError> { runtime.handle(line) }

        /// One datagram from the app into the netstack, then a loop turn.
        func sendUDP(from source: String, to destination: String, payload: Int) {
            let p = udpPacket(from: Endpoint(source)!, to: Endpoint(destination)!, payload: [UInt8](repeating: 7, count: payload))
            p.withUnsafeBytes { netstack.input($0, from: input) }
            loop.runOnce(timeoutMs: 0)
        }

        func stop() {
            runtime.stopAll()
            netstack.shutdown()
        }
    }

    func fixture(fromFile: Bool = true, rules: [String] = twoRules) throws -> Fixture {
        let text = Self.yaml(rules: rules, control: dir + "/control.sock")
        if fromFile { write(text) }
        return try Fixture(path: fromFile ? dir + "/loft.yaml" : nil, text: text)
    }

    func answer(_ r: Result<String, ControlServer.ControlError>, file: StaticString = #filePath, line: UInt = #line) -> String {
        switch r {
        case .success(let s): return s
        case .failure(let e): XCTFail("an error: \(e.description)", file: file, line: line); return ""
        }
    }

    func error(_ r: Result<String, ControlServer.ControlError>, file: StaticString = #filePath, line: UInt = #line) -> String {
        switch r {
        case .success(let s): XCTFail("answered: \(s)", file: file, line: line); return ""
        case .failure(let e): return e.description
        }
    }

    // MARK: requests that only read

    func testStatusInEachFormat() throws {
        let f = try fixture()
        defer { f.stop() }
        f.sendUDP(from: "10.0.0.2:40000", to: "198.18.1.1:53", payload: 100)
        // An hour later (on the loop's clock) that association has gone idle; another is live.
        f.loop.advance(by: 3_723_000)
        f.sendUDP(from: "10.0.0.2:40001", to: "198.18.2.2:5000", payload: 10)

        let json = answer(f.handle("status json"))
        XCTAssertTrue(json.hasPrefix("{\"version\":\"9.9.9-test\",\"pid\":\(getpid()),\"uptime_ms\":3723000,"), json)
        XCTAssertTrue(json.hasSuffix("}\n"))
        XCTAssertTrue(json.contains("\"rules\":[{\"index\":1,\"rule\":\"drop 198.18.99.0/24\",\"matches\":0,"), json)
        XCTAssertTrue(json.contains("{\"index\":2,\"rule\":\"via alt udp ports 53\",\"matches\":1,\"flows\":1,\"bytes_up\":100,"), json)
        XCTAssertTrue(json.contains("\"udp_associations\":1,"), json)
        XCTAssertTrue(json.contains("\"udp-associations-opened\":2,"), json)
        XCTAssertTrue(json.contains("\"flows-idle-closed\":1,"), json)
        XCTAssertTrue(json.contains("\"default_matches\":1}"), json)
        // The fake outbounds' own rows, "direct" first.
        XCTAssertTrue(json.contains("\"outbounds\":[{\"name\":\"direct\",\"type\":\"direct\",\"state\":\"ready\",\"detail\":\"\",\"flows_total\":1,"), json)
        XCTAssertTrue(json.contains("{\"name\":\"alt\",\"type\":\"direct\",\"state\":\"ready\",\"detail\":\"\",\"flows_total\":1,"), json)
        // No TUN, bridge or SOCKS5 in the file: each input's row says off.
        XCTAssertTrue(json.contains("{\"name\":\"tun\",\"state\":\"off\""), json)

        let text = answer(f.handle("status"))
        XCTAssertEqual(answer(f.handle("status text")), text)
        XCTAssertTrue(text.hasPrefix("loft 9.9.9-test   pid \(getpid())   up 01:02:03   rss "), text)
        XCTAssertTrue(text.hasSuffix("\nRULES   #1 -  #2 1  default 1\n"), text)
        XCTAssertTrue(text.contains("\nalt         direct  ready          1      -           -           -\n"), text)
        XCTAssertTrue(text.contains("\nFLOWS   tcp 0  connecting 0  handshaking 0  established 0  closing 0  udp 1\n"), text)
        XCTAssertTrue(text.contains("  flows-idle-closed 1\n"), text)

        let narrow = answer(f.handle("status text=40"))
        for l in narrow.split(separator: "\n") { XCTAssertLessThanOrEqual(l.count, 40, String(l)) }
        let wide = answer(f.handle("status text=1000"))
        XCTAssertNotEqual(narrow, wide)
        XCTAssertEqual(answer(f.handle("status text=80")), text)  // no terminal: 80 columns

        let metrics = answer(f.handle("metrics"))
        XCTAssertTrue(metrics.contains("loft_udp_associations 1\n"), metrics)
        XCTAssertTrue(metrics.contains("loft_rule_matches_total{rule=\"2\"} 1\n"), metrics)
        XCTAssertTrue(metrics.contains("\nloft_uptime_seconds 3723\n"), metrics)
        XCTAssertTrue(metrics.contains("\nloft_rule_matches_total{rule=\"default\"} 1\n"), metrics)
    }

    /// A capture running shows in `status` (text and JSON) with what it asked for and its
    /// packets; once it ends, the report is the one without captures again.
    func testStatusShowsTheCapturesRunning() throws {
        let f = try fixture()
        defer { f.stop() }
        let hub = CaptureHub(loop: f.loop)
        hub.add(.init(netif: f.input, kind: .tun, name: "tun-test"))
        f.runtime.capture = hub
        let before = answer(f.handle("status json"))
        XCTAssertFalse(before.contains("captures"), before)
        let pair = nonblockingSocketPair()
        let fds = [pair.reader, pair.loftSide]
        defer { Glibc.close(fds[0]) }
        var r = CaptureRequest()
        r.input = .tun
        r.drops = true
        hub.start(r, fd: fds[1])
        let p = udpPacket(from: Endpoint("10.0.0.2:40000")!, to: Endpoint("198.18.1.1:53")!, payload: [1, 2, 3])
        p.withUnsafeBytes { hub.packet($0, netif: f.input, .inbound) }
        f.loop.advance(by: 2000)
        let json = answer(f.handle("status json"))
        XCTAssertTrue(json.hasSuffix(",\"captures\":{\"running\":1,\"list\":[{\"id\":1,\"input\":\"tun\",\"outbound\":null," +
                                     "\"flow\":null,\"drops\":true,\"filter\":null,\"summary\":\"input tun, drops\"," +
                                     "\"packets\":1,\"lost\":0,\"age_ms\":2000}]}}\n"), json)
        XCTAssertTrue(answer(f.handle("status")).hasSuffix("\nCAPTURES 1 running\n  #1  1 packets, 0 lost, 00:00:02  input tun, drops\n"))
        hub.stop()
        f.loop.advance(by: 2000)
        let after = answer(f.handle("status json"))
        XCTAssertFalse(after.contains("captures"), after)
        XCTAssertFalse(answer(f.handle("status")).contains("CAPTURES"))
    }

    func testFlowsInEachOrder() throws {
        let f = try fixture()
        defer { f.stop() }
        XCTAssertEqual(answer(f.handle("flows")),
                       "      ID NET SOURCE                    DESTINATION               VIA             UP      DOWN       AGE\n(no live flows)\n")
        XCTAssertEqual(answer(f.handle("flows json")), "[]\n")

        // Oldest, fewest bytes up, most bytes down: each order puts another flow first.
        f.sendUDP(from: "10.0.0.2:40000", to: "198.18.1.1:53", payload: 100)
        f.loop.advance(by: 5000)
        f.sendUDP(from: "10.0.0.2:40001", to: "198.18.2.2:5000", payload: 300)
        f.loop.advance(by: 1000)
        f.sendUDP(from: "10.0.0.3:40002", to: "198.18.3.3:6000", payload: 40)
        f.sendUDP(from: "10.0.0.3:40002", to: "198.18.3.3:6000", payload: 40)
        XCTAssertEqual(f.alt.associations.count, 1)
        XCTAssertEqual(f.direct.associations.count, 2)
        f.alt.associations[0].reply([UInt8](repeating: 1, count: 1000), from: Endpoint("198.18.1.1:53")!)
        f.loop.runOnce(timeoutMs: 0)

        func sources(_ request: String) -> [String] {
            answer(f.handle(request)).split(separator: "\n").dropFirst().map { String($0.split(separator: " ")[2]) }
        }
        XCTAssertEqual(sources("flows sort=age"), ["10.0.0.2:40000", "10.0.0.2:40001", "10.0.0.3:40002"])
        XCTAssertEqual(sources("flows sort=up"), ["10.0.0.2:40001", "10.0.0.2:40000", "10.0.0.3:40002"])
        XCTAssertEqual(sources("flows sort=down").first, "10.0.0.2:40000")
        XCTAssertEqual(sources("flows sort=bytes"), ["10.0.0.2:40000", "10.0.0.2:40001", "10.0.0.3:40002"])
        XCTAssertEqual(sources("flows"), sources("flows sort=bytes"))

        let table = answer(f.handle("flows sort=age"))
        let first = table.split(separator: "\n")[1]
        XCTAssertEqual(String(first), "       1 udp 10.0.0.2:40000            198.18.1.1:53             alt          100 B    1000 B  00:00:06")

        let json = answer(f.handle("flows json sort=up"))
        XCTAssertTrue(json.hasPrefix("[{\"id\":2,\"network\":\"udp\",\"source\":\"10.0.0.2:40001\",\"destination\":\"198.18.2.2:5000\",\"outbound\":\"direct\",\"bytes_up\":300,\"bytes_down\":0,\"age_ms\":1000},"), json)
        XCTAssertEqual(answer(f.handle("flows sort=up json")), json)
    }

    // MARK: requests that change state

    func testPathChangedWithoutSessions() throws {
        let f = try fixture()
        defer { f.stop() }
        XCTAssertEqual(answer(f.handle("path-changed")), "no sessions to resume\n")
    }

    func testPathChangedRedialsAHolderAtOnce() throws {
        let f = try fixture()
        defer { f.stop() }
        // A holder whose front is not there: its first dial fails and it waits a minute.
        let carrier = CarrierClientOptions(kind: .ws, host: "127.0.0.1", port: closedPort(),
                                           tls: { var t = TLSClientOptions(serverName: "front.test"); t.insecure = true; return t }(),
                                           connectTimeoutMs: 5000)
        let options = HolderOptions(carrier: carrier, token: "t", clientName: "runtime-tests", hold: false,
                                    minBackoffMs: 60_000, maxBackoffMs: 60_000)
        let holder = try HolderOutbound(name: "home", loop: f.loop, runtime: try CarrierRuntime(loop: f.loop), options: options,
                                        fallback: f.direct)
        f.runtime.holders = [holder]
        holder.start()
        XCTAssertTrue(f.loop.run(seconds: 10) { holder.stats.state == "down" }, holder.stats.state)
        XCTAssertEqual(holder.stats.dials, 1)
        f.loop.advance(by: 20_000)  // the redial waits 45 s or more (60 s, jitter ±25 %)
        XCTAssertEqual(holder.stats.state, "down")
        XCTAssertEqual(holder.stats.dials, 1)

        XCTAssertEqual(answer(f.handle("path-changed")), "home: dialling now\n")
        XCTAssertEqual(holder.stats.pathChanges, 1)
        XCTAssertEqual(holder.stats.dials, 2)
        XCTAssertEqual(holder.stats.state, "dialing")
        // Asked again while that dial is under way: it is dropped and dialled again after the turn.
        XCTAssertEqual(answer(f.handle("path-changed")), "home: redialling with RESUME\n")
        XCTAssertEqual(holder.stats.pathChanges, 2)
        f.loop.runOnce(timeoutMs: 0)
        XCTAssertEqual(holder.stats.dials, 3)
    }

    /// The file's `type: sstp` outbound made as `loft run` makes it (Sources/loft/Startup.swift)
    /// on the fixture's loop, in the runtime's outbounds and sessions; its redials start at 10 s
    /// (not 0.5 s), so that a redial at once stands out.
    func sstpOutbound(named name: String, in f: Fixture) throws -> SSTPOutbound {
        let config = f.runtime.config
        guard case .sstp(let server, let user, let password, let verification, let serverName, let auth)? =
                config.outbound(named: name)?.kind else { throw TLSError("no sstp outbound \(name) in the file") }
        let hp = try XCTUnwrap(HostPort(server))
        var tls = TLSClientOptions(serverName: serverName)
        tls.insecure = verification == .insecure
        let timeout = config.limits.connectTimeout.components
        var options = SSTPOptions(host: hp.host, port: hp.port, tls: tls, user: user, password: password,
                                  auth: auth.map { $0 == .pap ? .pap : .mschapv2 }, hold: config.hold,
                                  connectTimeoutMs: UInt64(timeout.seconds) * 1000 + UInt64(timeout.attoseconds / 1_000_000_000_000_000))
        options.minBackoffMs = 10_000
        options.maxBackoffMs = 60_000
        let sstp = try SSTPOutbound(name: name, loop: f.loop, runtime: try CarrierRuntime(loop: f.loop), options: options,
                                    fallback: f.direct)
        f.runtime.outbounds[name] = sstp
        f.runtime.sstps.append(sstp)
        return sstp
    }

    func testPathChangedRedialsAnSSTPLinkAtOnce() throws {
        // The file's sstp outbound, its server's port closed: every dial is refused.
        let outbounds = "  - { name: alt, type: direct }\n"
            + "  - { name: corp, type: sstp, server: \"127.0.0.1:\(closedPort())\", user: u, password: p, tls: { insecure: true } }"
        let text = Self.yaml(rules: Self.twoRules, outbounds: outbounds, control: dir + "/control.sock")
        write(text)
        let f = try Fixture(path: dir + "/loft.yaml", text: text)
        defer { f.stop() }
        let sstp = try sstpOutbound(named: "corp", in: f)
        func dials() -> UInt64? { sstp.status.counter("dials") }
        func downAfter(_ n: UInt64) -> Bool { sstp.status.state == "down" && dials() == n }
        Log.threshold = .warn
        let log = StderrCapture(file: dir + "/stderr.log")
        defer { log.stop() }
        func downs() -> [String] { log.lines(containing: "event=sstp.down") }

        sstp.start()
        XCTAssertTrue(f.loop.run(seconds: 10) { downAfter(1) }, sstp.status.detail)
        XCTAssertTrue(sstp.status.detail.contains("last error connect: "), sstp.status.detail)
        // Its redials wait 10 s, then 20 s (±25 %); a refusal already logged is not logged again.
        f.loop.advance(by: 12_500)
        XCTAssertTrue(f.loop.run(seconds: 10) { downAfter(2) }, sstp.status.detail)
        f.loop.advance(by: 5_000)
        XCTAssertEqual(dials(), 2)
        XCTAssertEqual(downs().count, 1, log.text)

        XCTAssertEqual(answer(f.handle("path-changed")), "corp: redialling\n")
        let st = sstp.status
        XCTAssertEqual(st.counter("path-changes"), 1)
        XCTAssertEqual(st.state, "down")
        XCTAssertTrue(st.detail.hasSuffix("last error path changed (control)"), st.detail)
        let json = answer(f.handle("status json"))
        XCTAssertTrue(json.contains("{\"name\":\"corp\",\"type\":\"sstp\",\"state\":\"down\""), json)
        XCTAssertTrue(json.contains("\"path-changes\":1,"), json)
        // Dialled again 1 ms later, not 15 s or more.
        f.loop.advance(by: 1)
        XCTAssertEqual(dials(), 3)
        XCTAssertTrue(f.loop.run(seconds: 10) { downAfter(3) }, sstp.status.detail)
        XCTAssertTrue(sstp.status.detail.contains("last error connect: "), sstp.status.detail)
        // It forgot the reasons it had logged: the same refusal is logged again.
        let lines = downs()
        XCTAssertEqual(lines.count, 3, log.text)
        if lines.count == 3 {
            XCTAssertTrue(lines[0].contains("reason=\"connect: "), lines[0])
            XCTAssertTrue(lines[1].contains("reason=\"path changed (control)\" redial-ms=0 "), lines[1])
            XCTAssertTrue(lines[2].contains("reason=\"connect: "), lines[2])
        }
        // And its failures: the next redial waits 10 s (±25 %) again, not 30 s or more.
        f.loop.advance(by: 12_500)
        XCTAssertEqual(dials(), 4)
    }

    func testReloadAppliesTheFilesRules() throws {
        let f = try fixture()
        defer { f.stop() }
        f.sendUDP(from: "10.0.0.2:40000", to: "198.18.1.1:53", payload: 100)
        XCTAssertEqual(f.alt.associations.count, 1)

        // One rule more: UDP to 198.18.7.0/24 dropped, and port 53 now direct.
        write(Self.yaml(rules: ["{ action: drop, network: udp, to: [198.18.7.0/24] }", "{ action: drop, to: [198.18.99.0/24] }",
                                "{ action: direct, network: udp, ports: [53] }"], control: dir + "/control.sock"))
        XCTAssertEqual(answer(f.handle("reload")), "rules reloaded: 3\n")
        XCTAssertEqual(f.runtime.router?.rules.map { Router.summary($0.rule) },
                       ["drop udp 198.18.7.0/24", "drop 198.18.99.0/24", "direct udp ports 53"])
        // Per-rule usage starts again with the new rules: the old rule 2's flow is not the new one's.
        let json = answer(f.handle("status json"))
        XCTAssertTrue(json.contains("{\"index\":2,\"rule\":\"drop 198.18.99.0/24\",\"matches\":0,\"flows\":0,"), json)

        f.sendUDP(from: "10.0.0.2:40001", to: "198.18.1.1:53", payload: 10)
        f.sendUDP(from: "10.0.0.2:40002", to: "198.18.7.7:9", payload: 10)
        XCTAssertEqual(f.alt.associations.count, 1)
        XCTAssertEqual(f.direct.associations.count, 1)
        XCTAssertEqual(f.runtime.router?.rules.map(\.matches), [1, 0, 1])
    }

    func testReloadSaysWhatItDoesNotApply() throws {
        let f = try fixture()
        defer { f.stop() }
        write(Self.yaml(rules: Self.twoRules, outbounds: "  - { name: alt, type: drop }", socks5: "\n  listen: 127.0.0.1:11999",
                        control: dir + "/control.sock"))
        XCTAssertEqual(answer(f.handle("reload")), """
            rules reloaded: 2
            outbounds added, changed or removed in the file (alt) are not applied: restart loft to use them
            changed in the file but not applied (restart loft for them; it runs with the old ones): outbounds, socks5

            """)
        // The rules still route to the running "alt".
        f.sendUDP(from: "10.0.0.2:40000", to: "198.18.1.1:53", payload: 100)
        XCTAssertEqual(f.alt.associations.count, 1)
    }

    func testReloadThatFailsKeepsTheRules() throws {
        let f = try fixture()
        defer { f.stop() }
        let before = f.runtime.router?.rules.map { Router.summary($0.rule) }

        // A rule for an outbound the running loft does not have: refused, nothing changes.
        write(Self.yaml(rules: ["{ action: via, outbound: new, to: [198.18.1.0/24] }"],
                        outbounds: "  - { name: alt, type: direct }\n  - { name: new, type: direct }", control: dir + "/control.sock"))
        XCTAssertEqual(error(f.handle("reload")),
                       "reload: no outbound named \"new\"; outbounds added, changed or removed in the file (new) are not applied: restart loft to use them")
        XCTAssertEqual(f.runtime.router?.rules.map { Router.summary($0.rule) }, before)

        // A file that does not load: its error, nothing changes.
        write("rules: [\n")
        let e = error(f.handle("reload"))
        XCTAssertTrue(e.hasPrefix(dir + "/loft.yaml:"), e)
        XCTAssertEqual(f.runtime.router?.rules.map { Router.summary($0.rule) }, before)
    }

    func testReloadWithoutAFile() throws {
        let f = try fixture(fromFile: false)
        defer { f.stop() }
        XCTAssertEqual(error(f.handle("reload")), "reload: loft runs on its built-in default (no file to read)")
    }

    // MARK: requests it does not take

    func testUnknownAndMalformedRequests() throws {
        let f = try fixture()
        defer { f.stop() }
        XCTAssertEqual(error(f.handle("")), "empty request")
        XCTAssertEqual(error(f.handle("shutdown")), "unknown command \"shutdown\" (status, flows, metrics, path-changed, reload, capture)")
        XCTAssertEqual(error(f.handle(String(repeating: "x", count: 40))),
                       "unknown command \"\(String(repeating: "x", count: 32))\" (status, flows, metrics, path-changed, reload, capture)")
        XCTAssertEqual(error(f.handle("status yaml")), "status: unknown format \"yaml\"")
        XCTAssertEqual(error(f.handle("status text=39")), "status: unknown format \"text=39\"")
        XCTAssertEqual(error(f.handle("status json text")), "usage: status [json|text[=WIDTH]]")
        XCTAssertEqual(error(f.handle("flows sort=size")), "flows: unknown sort \"size\"")
        XCTAssertEqual(error(f.handle("flows all")), "usage: flows [json] [sort=bytes|age|up|down]")
        // None of them changed anything.
        XCTAssertEqual(f.runtime.router?.rules.count, 2)
    }
}

/// A whole IPv4/IPv6 UDP packet, checksum filled in.
func udpPacket(from source: Endpoint, to destination: Endpoint, payload: [UInt8]) -> [UInt8] {
    let len = 8 + payload.count
    var u = [UInt8](repeating: 0, count: 8) + payload
    func put16(_ at: Int, _ v: UInt16) { u[at] = UInt8(v >> 8); u[at + 1] = UInt8(truncatingIfNeeded: v) }
    put16(0, source.port)
    put16(2, destination.port)
    put16(4, UInt16(len))
    let sum = u.withUnsafeBytes {
        InternetChecksum.transport(source: source.address, destination: destination.address, proto: IPProtocol.udp, segment: $0)
    }
    put16(6, sum == 0 ? 0xFFFF : sum)
    return PacketBuilder.ipPacket(source: source.address, destination: destination.address, proto: IPProtocol.udp, payload: u)
}

/// A port on 127.0.0.1 nobody listens on: bound, noted, closed.
func closedPort() -> UInt16 {
    let fd = Sockets.make(family: AF_INET, type: Int32(SOCK_STREAM.rawValue))
    defer { close(fd) }
    let addr = SocketAddress(Endpoint(IPAddress.v4(0x7F00_0001), 0))
    _ = addr.withSockaddr { bind(fd, $0, $1) }
    return Sockets.localEndpoint(fd)!.port
}

/// What the process writes to stderr (loft's log lines) from `init` until `stop()`, in `file`.
final class StderrCapture {
    private let file: String
    private var saved: Int32

    init(file: String) {
        self.file = file
        let fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        saved = dup(2)
        dup2(fd, 2)
        close(fd)
    }

    /// stderr is the process's own again; the file goes.
    func stop() {
        guard saved >= 0 else { return }
        dup2(saved, 2)
        close(saved)
        saved = -1
        unlink(file)
    }

    var text: String {
        let fd = open(file, O_RDONLY)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { break }
            bytes += chunk[0..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    func lines(containing s: String) -> [String] { text.split(separator: "\n").map(String.init).filter { $0.contains(s) } }
}
