import Foundation
import Glibc
import LoftCore
import LoftIO
import LoftNetstack
import LoftTestSupport
import XCTest
@testable import LoftInputs

/// The TUN input through its public API, on a real TUN in a namespace of its own. NEEDS ROOT
/// (CAP_NET_ADMIN and /dev/net/tun): skipped, with the reason, otherwise.
final class TunInputTests: XCTestCase {
    /// A datagram an app in the namespace sends into the TUN reaches the fake outbound through
    /// the netstack; the outbound's reply reaches the app; stop() removes the namespace it made.
    func testADatagramFromTheNamespaceReachesTheOutboundAndTheReplyComesBack() throws {
        try XCTSkipUnless(geteuid() == 0, "needs root: creates a TUN and a network namespace")
        try XCTSkipUnless(access("/dev/net/tun", F_OK) == 0, "needs /dev/net/tun")
        Log.threshold = .warn
        let loop = try EventLoop()
        let out = TestOutbound()
        let netstack = netstack(on: loop, to: out)
        defer { netstack.shutdown() }
        let ns = "loftut\(getpid() % 100_000)"
        let tun = TunInput(settings: TunInput.Options(name: "loftut0", netns: ns, mtu: 1500, ipv4: IPPrefix("198.18.0.1/30")!, ipv6: nil,
                                                      routeAll: false, dns: [], offload: false),
                           loop: loop, netstack: netstack)
        try tun.start()
        var stopped = false
        defer {
            if !stopped { tun.stop() }
            unlink("/run/loft/netns-\(ns).lock")   // the instance lock's file, left by design
        }
        XCTAssertEqual(access("/var/run/netns/\(ns)", F_OK), 0, "the namespace was made")

        // The app: python in the namespace sends one datagram to an address behind the TUN and
        // prints the reply. It runs beside the loop (Process does not block it).
        let app = Process()
        app.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        app.arguments = ["ip", "netns", "exec", ns, "python3", "-c", """
            import socket
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(10)
            s.sendto(b"ping", ("198.18.0.2", 53))
            data, peer = s.recvfrom(100)
            print(data.decode(), peer[0], peer[1])
            """]
        let pipe = Pipe()
        app.standardOutput = pipe
        try app.run()
        let failed = loop.run(steps: [
            { out.associations.first?.sent.count == 1 },
            { out.associations[0].reply(Array("pong".utf8), from: Endpoint(IPAddress("198.18.0.2")!, 53)); return true },
            { !app.isRunning },
        ], seconds: 15)
        if app.isRunning { app.terminate() }
        XCTAssertNil(failed)
        let printed = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(printed, "pong 198.18.0.2 53\n")
        XCTAssertEqual(out.associations.first?.sent.first?.payload, Array("ping".utf8))
        XCTAssertEqual(out.associations.first?.sent.first?.to, .ip(Endpoint(IPAddress("198.18.0.2")!, 53)))
        XCTAssertGreaterThanOrEqual(tun.packetsRead, 1)
        XCTAssertGreaterThanOrEqual(tun.packetsWritten, 1)
        tun.stop()
        stopped = true
        XCTAssertNotEqual(access("/var/run/netns/\(ns)", F_OK), 0, "stop() removed the namespace it made")
    }
}
