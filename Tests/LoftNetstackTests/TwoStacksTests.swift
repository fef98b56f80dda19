import LoftCore
import LoftNetstack
import XCTest

/// Two netstacks in one process share one lwIP (its pcb lists, netif list and timers are
/// process globals), each owning its own netifs: their flows, counters and packets stay apart.
final class TwoStacksTests: XCTestCase {
    func testTwoStacksCarryTrafficIndependently() {
        let a = Harness()
        let b = Harness()
        defer {
            a.shutdown(expectEmpty: false)
            b.shutdown()
        }
        // The same 4-tuple on both stacks: each is its own connection.
        var appA = AppTCP(local: appV4, remote: remoteV4, isn: 1000)
        var appB = AppTCP(local: appV4, remote: remoteV4, isn: 900_000)
        let streamA = a.establish(&appA)
        let streamB = b.establish(&appB)
        XCTAssertEqual(a.netstack.states["established"], 1)
        XCTAssertEqual(b.netstack.states["established"], 1)
        XCTAssertEqual(Netstack.lwipResources().netifs, 2)
        XCTAssertEqual(Netstack.lwipResources().tcpActive, 2)

        // App → remote on each: only its own stack's outbound sees the bytes.
        a.send(appA.data(pattern(700, seed: 1)))
        b.send(appB.data(pattern(900, seed: 2)))
        assertBytes(streamA.written, pattern(700, seed: 1))
        assertBytes(streamB.written, pattern(900, seed: 2))

        // Remote → app on each: packets leave by the writer of the stack the flow is on.
        streamA.supply(pattern(20_000, seed: 3))
        streamB.supply(pattern(30_000, seed: 4))
        a.pumpToApp(&appA)
        b.pumpToApp(&appB)
        assertBytes(appA.received, pattern(20_000, seed: 3))
        assertBytes(appB.received, pattern(30_000, seed: 4))
        XCTAssertEqual(a.netstack.counters.tcpBytesDown, 20_000)
        XCTAssertEqual(b.netstack.counters.tcpBytesDown, 30_000)
        XCTAssertEqual(a.netstack.counters.tcpFlowsOpened, 1)
        XCTAssertEqual(b.netstack.counters.tcpFlowsOpened, 1)

        // UDP on each reaches its own stack's outbound.
        let dns = Endpoint(IPAddress("8.8.8.8")!, 53)
        a.send(udpPacket(from: Endpoint(appV4.address, 5000), to: dns, payload: [1]))
        b.send(udpPacket(from: Endpoint(appV4.address, 5000), to: dns, payload: [2]))
        XCTAssertEqual(a.outbound.associations.first?.sent.first?.payload, [1])
        XCTAssertEqual(b.outbound.associations.first?.sent.first?.payload, [2])

        // One stack shut down: the other's flow keeps carrying bytes.
        a.shutdown(expectEmpty: false)
        XCTAssertTrue(a.netstack.isShutDown)
        XCTAssertEqual(Netstack.lwipResources().netifs, 1)
        XCTAssertEqual(Netstack.lwipResources().tcpActive, 1)
        b.send(appB.data(pattern(500, seed: 5)))
        assertBytes(streamB.written, pattern(900, seed: 2) + pattern(500, seed: 5))
        streamB.supply(pattern(4000, seed: 6))
        b.pumpToApp(&appB)
        assertBytes(appB.received, pattern(30_000, seed: 4) + pattern(4000, seed: 6))
        // A new flow on the remaining stack opens (the shared listener is still there).
        var appB2 = AppTCP(local: Endpoint(appV4.address, 40001), remote: remoteV4, isn: 77)
        _ = b.establish(&appB2)
        XCTAssertEqual(b.netstack.states["established"], 2)
    }
}
