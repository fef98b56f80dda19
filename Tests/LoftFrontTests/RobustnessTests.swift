import LoftCarriers
import LoftCore
import LoftIO
import LoftProtocol
import LoftTestSupport
import XCTest
@testable import LoftFront

/// Clients that misbehave: silent, over their stream limit, resetting, or sending junk.
final class RobustnessTests: XCTestCase {
    func testSilentClientIsClosedAndItsInstanceKept() throws {
        let h = try FrontHarness(FrontHarness.settings(keepalive: .seconds(1)), clock: VirtualClock())
        let echo = TCPEchoServer(loop: h.loop)
        let c = h.dial()
        c.answersPings = false
        let ok = h.run([
            { c.connected },
            { c.send(.hello(Hello(token: "secret-1", clientName: "quiet"))); return true },
            { c.status != nil },
            { c.send(.open(stream: 1, network: .tcp, destination: .ip(Endpoint(.v4(0x7F00_0001), echo.port)))); return true },
            { c.has { $0 == .openOK(stream: 1) } },
            { c.closed != nil },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        let s = h.server.report()
        XCTAssertEqual(s.deadCarriers, 1)
        XCTAssertEqual(s.sessionsAttached, 0)
        XCTAssertEqual(s.instancesDetached, 1)
        XCTAssertEqual(s.streamsOpen, 0)
        XCTAssertTrue(c.has { if case .ping = $0 { return true }; return false })
    }

    func testStreamLimitAndResets() throws {
        let h = try FrontHarness()
        let echo = TCPEchoServer(loop: h.loop)
        let c = h.dial()
        let to = Destination.ip(Endpoint(.v4(0x7F00_0001), echo.port))
        let ok = h.run([
            { c.connected },
            { c.send(.hello(Hello(token: "secret-1", clientName: "greedy"))); return true },
            { c.status != nil },
            { c.send(.open(stream: 1, network: .tcp, destination: to)); return true },
            { c.has { $0 == .openOK(stream: 1) } },
            { c.send(.rst(stream: 1, reason: .cancel)); return true },
            { h.server.report().streamsOpen == 0 },
            // max-streams is 8 in the harness: the ninth open one is a protocol error.
            { for i in 0..<9 { c.send(.open(stream: UInt32(3 + 2 * i), network: .tcp, destination: to)) }; return true },
            { c.goAway != nil && c.closed != nil },
        ])
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1): \(c.frames)")
        XCTAssertEqual(c.goAway?.0, .protocolError)
        XCTAssertEqual(h.server.report().streamsOpen, 0)
        XCTAssertEqual(h.server.report().carriersOpen, 0)
    }

    /// Rounds of clients sending random, mostly well-formed frames (and raw junk) after HELLO;
    /// afterwards a well-behaved client still gets through.
    func testRandomFramesDoNotHurtTheFront() throws {
        let h = try FrontHarness(FrontHarness.settings(maxSessions: 64))
        let echo = TCPEchoServer(loop: h.loop)
        let udp = UDPEchoServer(loop: h.loop)
        var rng = SystemRandomNumberGenerator()
        var clients: [RawClient] = []
        var steps: [() -> Bool] = []
        let targets: [Destination] = [.ip(Endpoint(.v4(0x7F00_0001), echo.port)), .ip(Endpoint(.v4(0x7F00_0001), udp.port)),
                                      .ip(Endpoint(.v4(0x7F00_0001), 1)), .domain("localhost", echo.port),
                                      .domain("no-such-name.invalid", 80), .ip(Endpoint(IPAddress("::1")!, echo.port))]
        func randomFrame() -> Frame {
            let id = UInt32.random(in: 0...12, using: &rng)
            let dest = targets.randomElement(using: &rng)!
            switch Int.random(in: 0..<10, using: &rng) {
            case 0, 1: return .open(stream: id, network: Bool.random(using: &rng) ? .tcp : .udp, destination: dest)
            case 2, 3: return .data(stream: max(1, id), payload: (0..<Int.random(in: 1...3000, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) })
            case 4: return .fin(stream: max(1, id))
            case 5: return .rst(stream: max(1, id), reason: RstReason(rawValue: UInt8.random(in: 0...5, using: &rng)))
            case 6: return .credit(stream: max(1, id), increment: UInt32.random(in: 1...UInt32.max, using: &rng))
            case 7: return .dgram(association: max(1, id), remote: dest, payload: [1, 2, 3])
            case 8: return .ping(UInt64.random(in: 0...UInt64.max, using: &rng))
            default: return .status(Status(instanceID: .random(), keepaliveMs: 1, maxStreams: 1,
                                           overlay: Overlay(ipv4: IPPrefix("10.0.0.2/24")!, gateway4: IPAddress("10.0.0.1")!)))
            }
        }
        for _ in 0..<5 {
            steps.append {
                clients = (0..<10).map { _ in h.dial(Bool.random() ? .ws : .get) }
                return true
            }
            steps.append { clients.allSatisfy { $0.connected || $0.closed != nil } }
            steps.append {
                for c in clients {
                    c.send(.hello(Hello(token: "secret-1", clientName: "fuzz")))
                    for _ in 0..<Int.random(in: 1...40) {
                        if Int.random(in: 0..<20) == 0 {
                            c.sendRaw((0..<Int.random(in: 1...64)).map { _ in UInt8.random(in: 0...255) })
                        } else {
                            c.send(randomFrame())
                        }
                    }
                }
                return true
            }
            var until: UInt64 = 0
            steps.append { until = monotonicMilliseconds() + 300; return true }
            steps.append { monotonicMilliseconds() > until }
            steps.append { for c in clients { c.carrier?.abort() }; return true }
        }
        let good = RawClientBox()
        steps.append { good.client = h.dial(); return true }
        steps.append { good.client!.connected }
        steps.append { good.client!.send(.hello(Hello(token: "secret-1", clientName: "good"))); return true }
        steps.append { good.client!.status != nil }
        steps.append { good.client!.send(.open(stream: 1, network: .tcp, destination: targets[0])); return true }
        steps.append { good.client!.has { $0 == .openOK(stream: 1) } }
        steps.append { good.client!.send(.data(stream: 1, payload: [42])); return true }
        steps.append { good.client!.data[1] == [42] }
        let ok = h.run(seconds: 60, steps)
        XCTAssertTrue(ok, "stuck at step \(h.failedStep ?? -1)")
        XCTAssertGreaterThan(h.server.report().protocolErrors, 0)
    }
}

final class RawClientBox { var client: RawClient? }
