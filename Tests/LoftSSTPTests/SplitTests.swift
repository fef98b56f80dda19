import Testing
import LoftCore
@testable import LoftSSTP

/// The SSTP client's framed reader (`SSTPClient.receive`) with its input split at every byte
/// position across two reads: every packet comes out exact, and a control message (an Echo
/// Request) split the same way is answered once (issue 28: any framed reader on any stream).
@Suite struct SSTPSplitTests {
    @Test func everySplitOfARunOfPackets() {
        var s = ScriptedServer()
        s.upToAuth(authOption: [0xC2, 0x23, 0x81])
        guard s.mschapv2() != nil else { Issue.record("MS-CHAPv2 did not succeed"); return }
        _ = s.take()
        s.client.output = []
        s.client.tick(now: s.now + 3_000)
        s.now += 3_000
        s.ipcp()
        #expect(s.client.phase == .up)
        _ = s.take()
        // Three IPv4 packets (20, 20 and 300 bytes), an Echo Request
        // between them, in SSTP data packets with PPP headers.
        let packets: [[UInt8]] = [[0x45] + [UInt8](repeating: 7, count: 19), [0x45] + [UInt8](repeating: 1, count: 19),
                                  [0x45] + (0..<299).map { UInt8(truncatingIfNeeded: $0) }]
        func data(_ p: [UInt8]) -> [UInt8] {
            let h = SSTP.dataHeader(payloadLength: p.count + 4)
            let ph = PPP.header(PPP.ipv4)
            return [h.0, h.1, h.2, h.3, ph.0, ph.1, ph.2, ph.3] + p
        }
        let run = data(packets[0]) + SSTP.encode(SSTP.ControlMessage(.echoRequest, []))! + data(packets[1]) + data(packets[2])
        for k in 0...run.count {
            s.rec.packets.removeAll()
            run[0..<k].withUnsafeBytes { s.client.receive($0, now: s.now) }
            run[k...].withUnsafeBytes { s.client.receive($0, now: s.now) }
            #expect(s.rec.packets == packets, "split at byte \(k) of \(run.count)")
            let (_, control, _) = s.take()
            #expect(control.map(\.type) == [SSTP.MessageType.echoResponse.rawValue], "split at byte \(k): \(control)")
        }
        #expect(s.rec.ends.isEmpty)
    }
}
