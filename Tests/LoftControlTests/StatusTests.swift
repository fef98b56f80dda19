import XCTest
import LoftCore
@testable import LoftControl

final class StatusTests: XCTestCase {
    func sample() -> StatusReport {
        var r = StatusReport()
        r.version = "0.1.0"; r.pid = 42; r.uptimeMs = 3_723_000; r.residentBytes = 9 << 20; r.peakResidentBytes = 12 << 20
        var tun = StatusReport.Input(name: "tun", state: "up", detail: "loft0 in netns app, mtu 1500")
        tun.packetsIn = 1234; tun.packetsOut = 99; tun.bytesIn = 5 << 20; tun.bytesOut = 1 << 30
        tun.drops = [("truncated", 2), ("rule", 3)]
        r.inputs = [tun, StatusReport.Input(name: "bridge", state: "off", detail: "")]
        var o = OutboundStatus(name: "direct", type: "direct", state: "ready")
        o.flows = 7; o.liveFlows = 2; o.bytesUp = 100; o.bytesDown = 2048
        r.outbounds = [o]
        r.tcpFlowsByState = [("connecting", 1), ("handshaking", 0), ("established", 5), ("closing", 1)]
        r.udpAssociations = 3; r.maxFlows = 16384
        r.totals = [("tcp-flows-opened", 10), ("tcp-connect-failures", 1), ("udp-associations-opened", 4),
                    ("flows-evicted", 0), ("flows-idle-closed", 0)]
        r.drops = [("truncated", 2), ("rule", 3), ("flow-cap", 1)]
        return r
    }

    func testTextFitsTheWidthAndShowsPlaceholders() {
        let text = sample().text(width: 80)
        for line in text.split(separator: "\n") { XCTAssertLessThanOrEqual(line.count, 80, String(line)) }
        XCTAssertTrue(text.contains("up 01:02:03"))
        XCTAssertTrue(text.contains("1234"))
        XCTAssertTrue(text.contains("1.00 GiB"))
        XCTAssertTrue(text.contains("cap 16384"))
        // The bridge is off: dashes, not blanks or zeros.
        let bridge = text.split(separator: "\n").first { $0.hasPrefix("bridge") }!
        XCTAssertTrue(bridge.contains(" - "))
        XCTAssertTrue(StatusReport().text().contains("FLOWS"))
    }

    func testDropGroups() {
        let g = Dictionary(uniqueKeysWithValues: sample().dropGroups)
        XCTAssertEqual(g["malformed"], 2)
        XCTAssertEqual(g["rule"], 3)
        XCTAssertEqual(g["cap"], 1)
        XCTAssertEqual(g["hold"], 0)
    }

    func testJSONIsExact() {
        let j = sample().json.serialized
        XCTAssertTrue(j.hasPrefix("{\"version\":\"0.1.0\",\"pid\":42,"))
        XCTAssertTrue(j.contains("\"packets_in\":1234"))
        XCTAssertTrue(j.contains("\"tcp_flows\":{\"connecting\":1,\"handshaking\":0,\"established\":5,\"closing\":1,\"total\":7}"))
        XCTAssertEqual(JSON.string("a\"b\\\n\u{1}").serialized, "\"a\\\"b\\\\\\n\\u0001\"")
    }

    func testPrometheusNamesAndValues() {
        let m = sample().prometheus()
        XCTAssertTrue(m.contains("# TYPE loft_input_packets_total counter\n"))
        XCTAssertTrue(m.contains("loft_input_packets_total{input=\"tun\",direction=\"in\"} 1234\n"))
        XCTAssertTrue(m.contains("loft_tcp_flows_opened_total 10\n"))
        XCTAssertTrue(m.contains("loft_drops_total{reason=\"flow-cap\"} 1\n"))
        XCTAssertTrue(m.contains("loft_resident_memory_bytes 9437184\n"))
        // Every sample line belongs to a family declared with TYPE.
        var declared = Set<String>()
        for line in m.split(separator: "\n") {
            if line.hasPrefix("# TYPE ") { declared.insert(String(line.split(separator: " ")[2])) }
            else if !line.hasPrefix("#") {
                let name = String(line.prefix { $0 != "{" && $0 != " " })
                XCTAssertTrue(declared.contains(name), name)
            }
        }
    }

    /// Live captures: a CAPTURES section and a `captures` key only while some run; the report
    /// without them is what it was before captures were reported.
    func testCapturesShownOnlyWhileRunning() {
        let none = sample()
        XCTAssertFalse(none.text().contains("CAPTURES"))
        XCTAssertFalse(none.json.serialized.contains("captures"))
        var r = sample()
        var a = StatusReport.Capture(id: 1, input: "tun", drops: true, filter: "tcp port 80")
        a.packets = 1234; a.lost = 56; a.ageMs = 61_000
        var b = StatusReport.Capture(id: 3, input: "all", outbound: "direct", flow: 42)
        b.packets = 7
        r.captures = [a, b]
        XCTAssertEqual(a.summary, "input tun, drops, filter \"tcp port 80\"")
        XCTAssertEqual(b.summary, "input all, outbound direct, flow 42")
        let text = r.text(width: 80)
        for line in text.split(separator: "\n") { XCTAssertLessThanOrEqual(line.count, 80, String(line)) }
        XCTAssertTrue(text.hasPrefix(none.text()), "the rest of the screen is unchanged")
        XCTAssertTrue(text.hasSuffix("""
            CAPTURES 2 running
              #1  1234 packets, 56 lost, 00:01:01  input tun, drops, filter "tcp port 80"
              #3  7 packets, 0 lost, 00:00:00  input all, outbound direct, flow 42

            """), text)
        let j = r.json.serialized
        XCTAssertTrue(j.hasPrefix(String(none.json.serialized.dropLast())), "the other keys unchanged, captures last")
        XCTAssertTrue(j.hasSuffix(",\"captures\":{\"running\":2,\"list\":[" +
            "{\"id\":1,\"input\":\"tun\",\"outbound\":null,\"flow\":null,\"drops\":true,\"filter\":\"tcp port 80\"," +
            "\"summary\":\"input tun, drops, filter \\\"tcp port 80\\\"\",\"packets\":1234,\"lost\":56,\"age_ms\":61000}," +
            "{\"id\":3,\"input\":\"all\",\"outbound\":\"direct\",\"flow\":42,\"drops\":false,\"filter\":null," +
            "\"summary\":\"input all, outbound direct, flow 42\",\"packets\":7,\"lost\":0,\"age_ms\":0}]}}"), j)
        // The metrics do not change with captures.
        XCTAssertEqual(r.prometheus(), none.prometheus())
    }

    func testFormats() {
        XCTAssertEqual(Format.bytes(512), "512 B")
        XCTAssertEqual(Format.bytes(1536), "1.50 KiB")
        XCTAssertEqual(Format.bytes(50 << 20), "50.0 MiB")
        XCTAssertEqual(Format.duration(90_061_000), "1d 01:01:01")
    }
}

final class RenderCacheTests: XCTestCase {
    /// Requests closer than 100 ms share a render at most 200 ms old; a request after a quiet
    /// spell is always rendered fresh.
    func testStormSharesRendersQuietRequestIsFresh() {
        let cache = RenderCache()
        var renders = 0
        func ask(_ now: UInt64) -> [UInt8] {
            cache.answer("status", now: now) { renders += 1; return [UInt8(renders)] }
        }
        XCTAssertEqual(ask(1000), [1])
        XCTAssertEqual(ask(1050), [1], "50 ms later, in a storm: cached")
        XCTAssertEqual(ask(1100), [1])
        XCTAssertEqual(ask(1150), [1])
        XCTAssertEqual(ask(1210), [2], "the render is over 200 ms old")
        XCTAssertEqual(ask(1500), [3], "after a quiet 290 ms: fresh")
        XCTAssertEqual(cache.hits, 3)
        // Another request line has its own entry.
        XCTAssertEqual(cache.answer("flows", now: 1510) { [9] }, [9])
    }
}
