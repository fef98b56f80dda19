import Glibc
import LoftCore
@testable import LoftIO
@testable import LoftNetstack
import XCTest

private final class Keyed: TableKeyed {
    let key: Int
    init(_ key: Int) { self.key = key }
}

final class KeyedTableTests: XCTestCase {
    /// Random inserts, lookups and removals against a Dictionary, through growth, shrinking and
    /// long probe runs (keys chosen from a small range so runs form and wrap).
    func testMatchesADictionaryThroughGrowthAndShrinking() {
        var table = KeyedTable<Keyed>()
        var model: [Int: Keyed] = [:]
        var rng = SystemRandomNumberGenerator()
        var peak = 0
        for round in 0..<40_000 {
            let k = Int.random(in: 0..<(round < 20_000 ? 3000 : 200), using: &rng)
            if let e = model[k] {
                if Bool.random(using: &rng) {
                    XCTAssertTrue(table.remove(e))
                    XCTAssertFalse(table.remove(e), "removed once")
                    model[k] = nil
                } else {
                    XCTAssertFalse(table.remove(Keyed(k)), "only the entry itself is removed")
                }
            } else {
                let e = Keyed(k)
                table.insert(e)
                model[k] = e
            }
            XCTAssertEqual(table.count, model.count)
            peak = max(peak, table.capacity)
            XCTAssertLessThanOrEqual(table.count * 4, table.capacity * 3)
            if round % 997 == 0 {
                for probe in 0..<3000 { XCTAssertTrue(table[probe] === model[probe], "key \(probe)") }
                XCTAssertEqual(Set(table.map { $0.key }), Set(model.keys))
            }
        }
        XCTAssertGreaterThanOrEqual(peak, 2048, "grew")
        for e in table.all.dropLast(10) {
            XCTAssertTrue(table.remove(e))
            model[e.key] = nil
        }
        XCTAssertLessThanOrEqual(table.capacity, 128, "shrank once most entries were gone")
        for probe in 0..<3000 { XCTAssertTrue(table[probe] === model[probe], "key \(probe)") }
        for e in table.all { XCTAssertTrue(table.remove(e)) }
        XCTAssertTrue(table.isEmpty)
        XCTAssertNil(table[1])
    }
}

final class IdleDeadlineTests: XCTestCase {
    /// Idle TCP flows are reset from the oldest end of the activity list by the netstack's one
    /// timer: the flow that moved bytes lives on, the one that did not goes at its deadline.
    func testIdleFlowIsResetAndActiveOneKept() {
        var settings = Netstack.Settings()
        settings.tcpIdleTimeoutMs = 60
        let h = Harness(settings: settings, clock: VirtualClock())
        defer { h.shutdown() }
        var app1 = AppTCP(local: Endpoint(appV4.address, 40011), remote: remoteV4)
        var app2 = AppTCP(local: Endpoint(appV4.address, 40012), remote: remoteV4)
        let s1 = h.establish(&app1)
        let s2 = h.establish(&app2)
        let timersWithTwoFlows = h.loop.pendingTimers
        // app1 keeps sending for 100 ms; app2 is silent.
        for i in 0..<10 {
            h.loop.advance(by: 10)
            h.send(app1.data(pattern(10, seed: UInt8(i))))
            h.deliver(to: &app1)
        }
        h.turns(3)
        XCTAssertEqual(s2.resetCalls, 1, "the silent flow's outbound was reset")
        XCTAssertEqual(s1.resetCalls, 0)
        h.deliver(to: &app2)
        XCTAssertTrue(app2.rstReceived, "the idle flow's app got an RST")
        XCTAssertEqual(h.netstack.tcpFlowCount, 1)
        XCTAssertEqual(h.netstack.counters.idleClosed, 1)
        XCTAssertLessThanOrEqual(timersWithTwoFlows, 2, "no timer per idle flow")
        // Then app1 falls silent too.
        for _ in 0..<12 where s1.resetCalls == 0 {
            h.loop.advance(by: 10)
            h.turn()
        }
        XCTAssertEqual(s1.resetCalls, 1)
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(h.netstack.counters.idleClosed, 2)
    }

    func testIdleAssociationIsClosed() {
        let appUDP = Endpoint(IPAddress("10.0.0.2")!, 5353)
        let dns1 = Endpoint(IPAddress("8.8.8.8")!, 53)
        var settings = Netstack.Settings()
        settings.udpIdleTimeoutMs = 40
        let h = Harness(settings: settings, clock: VirtualClock())
        defer { h.shutdown() }
        h.send(udpPacket(from: appUDP, to: dns1, payload: Array("q1".utf8)))
        let other = Endpoint(appUDP.address, appUDP.port &+ 1)
        h.send(udpPacket(from: other, to: dns1, payload: Array("q2".utf8)))
        XCTAssertEqual(h.netstack.udpAssociationCount, 2)
        for _ in 0..<6 {
            h.loop.advance(by: 10)
            h.send(udpPacket(from: other, to: dns1, payload: Array("q3".utf8)))
        }
        h.turns(2)
        XCTAssertEqual(h.netstack.udpAssociationCount, 1, "the silent association went")
        XCTAssertTrue(h.outbound.associations[0].closed)
        XCTAssertFalse(h.outbound.associations[1].closed)
        for _ in 0..<10 where h.netstack.udpAssociationCount > 0 {
            h.loop.advance(by: 10)
            h.turn()
        }
        XCTAssertEqual(h.netstack.udpAssociationCount, 0)
        XCTAssertEqual(h.netstack.counters.idleClosed, 2)
    }
}
