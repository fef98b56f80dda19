import Testing
import LoftCore
@testable import LoftSSTP

/// Builds IPv6 packets for the tests with their own checksum arithmetic (not loft's
/// InternetChecksum), so that a wrong sum in either shows.
enum ND6 {
    static func bytes(_ a: String) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        out.withUnsafeMutableBytes { _ = IPAddress(a)!.write(to: $0.baseAddress!) }
        return out
    }

    /// RFC 1071 over the IPv6 pseudo-header (RFC 8200 8.1) and the ICMPv6 message.
    static func icmpSum(src: [UInt8], dst: [UInt8], icmp: [UInt8]) -> UInt16 {
        let n = icmp.count
        var words = src + dst + [UInt8(n >> 24 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF), 0, 0, 0, 58] + icmp
        if words.count % 2 == 1 { words.append(0) }
        var sum: UInt32 = 0
        for i in stride(from: 0, to: words.count, by: 2) { sum += UInt32(words[i]) << 8 | UInt32(words[i + 1]) }
        while sum > 0xFFFF { sum = (sum & 0xFFFF) + (sum >> 16) }
        return ~UInt16(sum)
    }

    /// A Neighbor Solicitation (RFC 4861 4.3) as a host behind SoftEther's hub sends it over the
    /// link (SoftEther strips the link-layer option; `options` adds some back).
    static func solicitation(from src: String, to dst: String, target: String, hopLimit: UInt8 = 255, code: UInt8 = 0,
                             options: [UInt8] = [], corruptSum: Bool = false) -> [UInt8] {
        var icmp: [UInt8] = [135, code, 0, 0, 0, 0, 0, 0] + bytes(target) + options
        var sum = icmpSum(src: bytes(src), dst: bytes(dst), icmp: icmp)
        if corruptSum { sum ^= 0x0100 }
        icmp[2] = UInt8(sum >> 8); icmp[3] = UInt8(sum & 0xFF)
        return [0x60, 0, 0, 0, UInt8(icmp.count >> 8), UInt8(icmp.count & 0xFF), 58, hopLimit] + bytes(src) + bytes(dst) + icmp
    }
}

@Suite struct NeighborDiscoveryTests {
    let mine = IPAddress("fe80::d5d7:f8c8:6786:a655")!

    @Test func solicitedNodeAddress() {
        #expect(NeighborDiscovery.solicitedNode(mine) == IPAddress("ff02::1:ff86:a655"))
        #expect(NeighborDiscovery.solicitedNode(IPAddress("fe80::2")!) == IPAddress("ff02::1:ff00:2"))
    }

    @Test func answersASolicitationForItsAddress() {
        // To the solicited-node address (a host's first resolution) and unicast (its probes).
        for dst in ["ff02::1:ff86:a655", "fe80::d5d7:f8c8:6786:a655"] {
            let ns = ND6.solicitation(from: "fe80::f06b:9dff:fe8e:65", to: dst, target: "fe80::d5d7:f8c8:6786:a655")
            guard let na = ns.withUnsafeBytes({ NeighborDiscovery.answer($0, for: mine) }) else {
                Issue.record("no answer to \(dst)"); continue
            }
            #expect(na.count == 64)
            #expect(Array(na[0..<8]) == [0x60, 0, 0, 0, 0, 24, 58, 255])
            #expect(Array(na[8..<24]) == ND6.bytes("fe80::d5d7:f8c8:6786:a655"))
            #expect(Array(na[24..<40]) == ND6.bytes("fe80::f06b:9dff:fe8e:65"))
            #expect(na[40] == 136 && na[41] == 0)
            #expect(Array(na[44..<48]) == [0x60, 0, 0, 0], "Solicited and Override, not Router")
            #expect(Array(na[48..<64]) == ND6.bytes("fe80::d5d7:f8c8:6786:a655"))
            #expect(ND6.icmpSum(src: Array(na[8..<24]), dst: Array(na[24..<40]), icmp: Array(na[40...])) == 0)
        }
    }

    @Test func duplicateAddressDetectionIsAnsweredToAllNodes() {
        let ns = ND6.solicitation(from: "::", to: "ff02::1:ff86:a655", target: "fe80::d5d7:f8c8:6786:a655")
        let na = ns.withUnsafeBytes { NeighborDiscovery.answer($0, for: mine) }
        #expect(na.map { Array($0[24..<40]) } == ND6.bytes("ff02::1"))
        #expect(na.map { $0[44] } == 0x20, "Override only")
        #expect(na.map { ND6.icmpSum(src: Array($0[8..<24]), dst: Array($0[24..<40]), icmp: Array($0[40...])) } == 0)
        // From the unspecified address: never unicast, never with a source link-layer option.
        let unicast = ND6.solicitation(from: "::", to: "fe80::d5d7:f8c8:6786:a655", target: "fe80::d5d7:f8c8:6786:a655")
        #expect(unicast.withUnsafeBytes { NeighborDiscovery.answer($0, for: mine) } == nil)
        let withOption = ND6.solicitation(from: "::", to: "ff02::1:ff86:a655", target: "fe80::d5d7:f8c8:6786:a655",
                                          options: [1, 1, 2, 0, 0, 0, 0, 1])
        #expect(withOption.withUnsafeBytes { NeighborDiscovery.answer($0, for: mine) } == nil)
    }

    @Test func ignoresWhatIsNotAValidSolicitationForIt() {
        let from = "fe80::f06b:9dff:fe8e:65", sn = "ff02::1:ff86:a655", me = "fe80::d5d7:f8c8:6786:a655"
        let cases: [(String, [UInt8])] = [
            ("another target", ND6.solicitation(from: from, to: "ff02::1:ffca:49f3", target: "fe80::c849:f3ff:feca:49f3")),
            ("another target, to loft", ND6.solicitation(from: from, to: me, target: "fe80::1")),
            ("hop limit 64 (from off the link)", ND6.solicitation(from: from, to: sn, target: me, hopLimit: 64)),
            ("code 1", ND6.solicitation(from: from, to: sn, target: me, code: 1)),
            ("bad checksum", ND6.solicitation(from: from, to: sn, target: me, corruptSum: true)),
            ("zero-length option", ND6.solicitation(from: from, to: sn, target: me, options: [1, 0, 0, 0, 0, 0, 0, 0])),
            ("option past the end", ND6.solicitation(from: from, to: sn, target: me, options: [1, 2, 0, 0, 0, 0, 0, 0])),
            ("from a multicast address", ND6.solicitation(from: "ff02::1", to: sn, target: me)),
            ("to all nodes", ND6.solicitation(from: from, to: "ff02::1", target: me)),
        ]
        for (name, p) in cases {
            #expect(p.withUnsafeBytes { NeighborDiscovery.answer($0, for: mine) } == nil, "\(name)")
        }
        // A good one with a (kept) source link-layer option is answered; truncated, it is not.
        let good = ND6.solicitation(from: from, to: sn, target: me, options: [1, 1, 2, 0, 0, 0, 0, 1])
        #expect(good.withUnsafeBytes { NeighborDiscovery.answer($0, for: mine) } != nil)
        for n in [0, 40, 63, 70] {
            #expect(Array(good.prefix(n)).withUnsafeBytes { NeighborDiscovery.answer($0, for: mine) } == nil)
        }
        // An echo request to loft's address is not a solicitation.
        var echo = good
        echo[40] = 128
        #expect(echo.withUnsafeBytes { NeighborDiscovery.answer($0, for: mine) } == nil)
    }
}
