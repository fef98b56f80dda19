import LoftCore
import LoftIO
@testable import LoftNetstack
import XCTest

/// Routes by name when a flow has one (as a `domains` rule would): `named` for the name
/// `match`, `other` for everything else; a name may decide every flow.
final class NameRouter: FlowRouter {
    let named: Outbound, other: Outbound, match: String
    var requests: [FlowRequest] = []
    init(named: Outbound, other: Outbound, match: String) { self.named = named; self.other = other; self.match = match }
    func route(_ request: FlowRequest) -> RouteMatch {
        requests.append(request)
        return request.name == match ? RouteMatch(.outbound(named), rule: 0) : RouteMatch(.outbound(other), rule: -1)
    }
    func nameMayDecide(_ request: FlowRequest) -> Bool { true }
}

/// Sniffing (docs/sniffing.md): lwIP accepts at once, the outbound is chosen and dialled after
/// the app's first bytes, which then reach it intact.
final class SniffTests: XCTestCase {
    /// curl's ClientHello for www.example.org (LoftSniffTests has the same capture).
    static let hello: [UInt8] = {
        let s = "1603010200010001fc030330e29fe4b40827995423f46bfecc859a498b2ea5506a92ae92fa274b9730f773207d2b48edd240e81b0647a3d887aa25b33cd4333befb98d07795f2d0443501284003e130213031301c02cc030009fcca9cca8ccaac02bc02f009ec024c028006bc023c0270067c00ac0140039c009c0130033009d009c003d003c0035002f00ff0100017500000014001200000f7777772e6578616d706c652e6f7267000b000403000102000a00160014001d0017001e00190018010001010102010301040010000e000c02683208687474702f312e31001600000017000000310000000d002a0028040305030603080708080809080a080b080408050806040105010601030303010302040205020602002b0009080304030303020301002d00020101003300260024001d00206e3dfa9a35eee19f2d7e5efc5a6c13af864c396ccb2b12f1e13cb5dd91316265001500ae000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
        var out: [UInt8] = []
        var i = s.startIndex
        while i < s.endIndex { let j = s.index(i, offsetBy: 2); out.append(UInt8(s[i..<j], radix: 16)!); i = j }
        return out
    }()
    let tls = Endpoint(IPAddress("93.184.216.34")!, 443)

    func sniffing(waitMs: UInt64 = 300) -> Netstack.Settings {
        var s = Netstack.Settings()
        s.sniff.enabled = true
        s.sniff.waitMs = waitMs
        return s
    }

    /// SYN and ACK: lwIP's handshake completes with no outbound opened.
    func handshake(_ h: Harness, _ app: inout AppTCP, file: StaticString = #filePath, line: UInt = #line) {
        h.send(app.syn())
        h.deliver(to: &app)
        XCTAssertTrue(app.synAckSeen, "lwIP answers the SYN at once", file: file, line: line)
        XCTAssertEqual(h.outbound.streams.count, 0, "no outbound before the first bytes", file: file, line: line)
        h.send(app.ackPacket())
    }

    func testHelloInTwoSegmentsIsDialledByName() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        h.outbound.dialsSniffedNames = true
        var app = AppTCP(local: appV4, remote: tls)
        handshake(h, &app)
        h.send(app.data(Array(Self.hello[0..<100])))
        XCTAssertEqual(h.outbound.streams.count, 0, "a part of the hello: still waiting")
        h.send(app.data(Array(Self.hello[100...])))
        XCTAssertEqual(h.outbound.streams.count, 1)
        guard let stream = h.outbound.streams.first else { return }
        XCTAssertEqual(stream.destination, .domain("www.example.org", 443))
        XCTAssertEqual(h.netstack.counters.sniffed, 1)
        let row = h.netstack.flowSnapshot().first
        XCTAssertEqual(row?.name, "www.example.org")
        XCTAssertEqual(row?.nameSource, "sni")
        // Connected: the hello goes out whole, and the answer comes back.
        stream.connect()
        h.turns(3)
        assertBytes(stream.written, Self.hello)
        stream.supply(pattern(3000))
        h.pumpToApp(&app)
        assertBytes(app.received, pattern(3000))
    }

    /// Where no name can matter (no rule by name, an outbound that dials addresses) the flow
    /// is not sniffed: the SYN is held until the outbound connects, as without sniffing.
    func testNotSniffedWhereNoNameMatters() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: tls)
        h.send(app.syn())
        XCTAssertEqual(h.outbound.streams.count, 1, "dialled at the SYN")
        h.deliver(to: &app)
        XCTAssertFalse(app.synAckSeen)
        XCTAssertEqual(h.outbound.streams.first?.destination, .ip(tls))
    }

    func testNameDecidesTheRoute() {
        let named = TestOutbound(), other = TestOutbound()
        named.dialsSniffedNames = true
        let router = NameRouter(named: named, other: other, match: "www.example.org")
        defer { XCTAssertEqual(router.requests.count, 2) }
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        let ns = Netstack(loop: h.loop, router: router, settings: sniffing())
        let writer = TestWriter()
        let input = ns.addInput(mtu: 1500, writer: writer)
        func pump() {
            for t in named.streams + other.streams { t.deliverReadiness() }
            ns.afterEvents(); h.loop.runOnce(timeoutMs: 0); ns.afterEvents()
        }
        func feed(_ p: [UInt8]) { p.withUnsafeBytes { ns.input($0, from: input) }; pump() }
        var app = AppTCP(local: appV4, remote: tls)
        feed(app.syn())
        for p in writer.packets { if let s = Segment.parse(p) { app.receive(s) } }
        writer.packets = []
        feed(app.ackPacket())
        feed(app.data(Self.hello))
        XCTAssertEqual(router.requests.count, 1, "routed once, after the bytes")
        XCTAssertEqual(router.requests.first?.name, "www.example.org")
        XCTAssertEqual(router.requests.first?.destination, .ip(tls))
        XCTAssertEqual(named.streams.first?.destination, .domain("www.example.org", 443))
        XCTAssertEqual(other.streams.count, 0)
        // Another name (HTTP Host) goes to the outbound that takes none: the address is kept.
        var app2 = AppTCP(local: Endpoint(IPAddress("10.0.0.2")!, 40001), remote: remoteV4)
        feed(app2.syn())
        for p in writer.packets { if let s = Segment.parse(p), app2.owns(s) { app2.receive(s) } }
        writer.packets = []
        feed(app2.ackPacket())
        let head = Array("GET / HTTP/1.1\r\nHost: Example.ORG\r\n\r\n".utf8)
        feed(app2.data(head))
        XCTAssertEqual(other.streams.first?.destination, .ip(remoteV4))
        let row = ns.flowSnapshot().first { $0.source == app2.local }
        XCTAssertEqual(row?.name, "example.org")
        XCTAssertEqual(row?.nameSource, "host")
        other.streams.first?.connect()
        for _ in 0..<3 { pump() }
        assertBytes(other.streams.first?.written ?? [], head)
        ns.shutdown()
    }

    func testServerFirstRoutesByAddressAfterTheWait() {
        let h = Harness(settings: sniffing(waitMs: 300), clock: VirtualClock())
        defer { h.shutdown() }
        h.outbound.dialsSniffedNames = true
        var app = AppTCP(local: appV4, remote: Endpoint(IPAddress("93.184.216.34")!, 2222))
        handshake(h, &app)
        h.loop.advance(by: .milliseconds(200))
        h.turn()
        XCTAssertEqual(h.outbound.streams.count, 0, "still within the wait")
        h.loop.advance(by: .milliseconds(150))
        h.turn()
        XCTAssertEqual(h.outbound.streams.count, 1)
        XCTAssertEqual(h.outbound.streams.first?.destination, .ip(app.remote))
        XCTAssertEqual(h.netstack.counters.sniffTimedOut, 1)
        guard let stream = h.outbound.streams.first else { return }
        stream.connect()
        stream.supply(Array("SSH-2.0-x\r\n".utf8))
        h.pumpToApp(&app)
        XCTAssertEqual(app.received, Array("SSH-2.0-x\r\n".utf8))
    }

    func testSkippedPortHoldsTheSYNAsBefore() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        var app = AppTCP(local: appV4, remote: Endpoint(IPAddress("93.184.216.34")!, 22))
        h.send(app.syn())
        XCTAssertEqual(h.outbound.streams.count, 1, "port 22: dialled at the SYN")
        h.deliver(to: &app)
        XCTAssertFalse(app.synAckSeen, "the SYN is held until the outbound connects")
        XCTAssertEqual(h.outbound.streams.first?.destination, .ip(app.remote))
    }

    func testOtherBytesAreNotSniffableAndGoAtOnce() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        h.outbound.dialsSniffedNames = true
        var app = AppTCP(local: appV4, remote: remoteV4)
        handshake(h, &app)
        h.send(app.data([0, 0, 0, 8, 4, 0xD2, 0x16, 0x2F]))
        XCTAssertEqual(h.outbound.streams.count, 1)
        XCTAssertEqual(h.netstack.counters.notSniffable, 1)
        XCTAssertNil(h.netstack.flowSnapshot().first?.name)
    }

    func testAppResetWhileWaitingEndsTheFlow() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        h.outbound.dialsSniffedNames = true
        var app = AppTCP(local: appV4, remote: tls)
        handshake(h, &app)
        h.send(app.data(Array(Self.hello[0..<50])))
        XCTAssertEqual(h.netstack.tcpFlowCount, 1)
        h.send(app.rst())
        h.turns(2)
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
        XCTAssertEqual(h.outbound.streams.count, 0)
    }

    func testRefusedAfterSniffingResetsTheApp() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        h.outbound.dialsSniffedNames = true
        var app = AppTCP(local: appV4, remote: tls)
        handshake(h, &app)
        h.send(app.data(Self.hello))
        guard let stream = h.outbound.streams.first else { return XCTFail("no outbound") }
        stream.fail(.refused)
        h.turns(2)
        h.deliver(to: &app)
        XCTAssertTrue(app.rstReceived)
        XCTAssertEqual(h.netstack.tcpFlowCount, 0)
    }

    // MARK: QUIC Initials (UDP)

    static func hex(_ s: String) -> [UInt8] {
        var out: [UInt8] = []
        var i = s.startIndex
        while i < s.endIndex { let j = s.index(i, offsetBy: 2); out.append(UInt8(s[i..<j], radix: 16)!); i = j }
        return out
    }
    /// RFC 9001 Appendix A.2's client Initial (SNI example.com), and aioquic's hello in two
    /// Initials (SNI split.loft.test), as in LoftSniffTests.
    static let rfc9001 = hex("c000000001088394c8f03e5157080000449e7b9aec34d1b1c98dd7689fb8ec11d242b123dc9bd8bab936b47d92ec356c0bab7df5976d27cd449f63300099f3991c260ec4c60d17b31f8429157bb35a1282a643a8d2262cad67500cadb8e7378c8eb7539ec4d4905fed1bee1fc8aafba17c750e2c7ace01e6005f80fcb7df621230c83711b39343fa028cea7f7fb5ff89eac2308249a02252155e2347b63d58c5457afd84d05dfffdb20392844ae812154682e9cf012f9021a6f0be17ddd0c2084dce25ff9b06cde535d0f920a2db1bf362c23e596d11a4f5a6cf3948838a3aec4e15daf8500a6ef69ec4e3feb6b1d98e610ac8b7ec3faf6ad760b7bad1db4ba3485e8a94dc250ae3fdb41ed15fb6a8e5eba0fc3dd60bc8e30c5c4287e53805db059ae0648db2f64264ed5e39be2e20d82df566da8dd5998ccabdae053060ae6c7b4378e846d29f37ed7b4ea9ec5d82e7961b7f25a9323851f681d582363aa5f89937f5a67258bf63ad6f1a0b1d96dbd4faddfcefc5266ba6611722395c906556be52afe3f565636ad1b17d508b73d8743eeb524be22b3dcbc2c7468d54119c7468449a13d8e3b95811a198f3491de3e7fe942b330407abf82a4ed7c1b311663ac69890f4157015853d91e923037c227a33cdd5ec281ca3f79c44546b9d90ca00f064c99e3dd97911d39fe9c5d0b23a229a234cb36186c4819e8b9c5927726632291d6a418211cc2962e20fe47feb3edf330f2c603a9d48c0fcb5699dbfe5896425c5bac4aee82e57a85aaf4e2513e4f05796b07ba2ee47d80506f8d2c25e50fd14de71e6c418559302f939b0e1abd576f279c4b2e0feb85c1f28ff18f58891ffef132eef2fa09346aee33c28eb130ff28f5b766953334113211996d20011a198e3fc433f9f2541010ae17c1bf202580f6047472fb36857fe843b19f5984009ddc324044e847a4f4a0ab34f719595de37252d6235365e9b84392b061085349d73203a4a13e96f5432ec0fd4a1ee65accdd5e3904df54c1da510b0ff20dcc0c77fcb2c0e0eb605cb0504db87632cf3d8b4dae6e705769d1de354270123cb11450efc60ac47683d7b8d0f811365565fd98c4c8eb936bcab8d069fc33bd801b03adea2e1fbc5aa463d08ca19896d2bf59a071b851e6c239052172f296bfb5e72404790a2181014f3b94a4e97d117b438130368cc39dbb2d198065ae3986547926cd2162f40a29f0c3c8745c0f50fba3852e566d44575c29d39a03f0cda721984b6f440591f355e12d439ff150aab7613499dbd49adabc8676eef023b15b65bfc5ca06948109f23f350db82123535eb8a7433bdabcb909271a6ecbcb58b936a88cd4e8f2e6ff5800175f113253d8fa9ca8885c2f552e657dc603f252e1a8e308f76f0be79e2fb8f5d5fbbe2e30ecadd220723c8c0aea8078cdfcb3868263ff8f0940054da48781893a7e49ad5aff4af300cd804a6b6279ab3ff3afb64491c85194aab760d58a606654f9f4400e8b38591356fbf6425aca26dc85244259ff2b19c41b9f96f3ca9ec1dde434da7d2d392b905ddf3d1f9af93d1af5950bd493f5aa731b4056df31bd267b6b90a079831aaf579be0a39013137aac6d404f518cfd46840647e78bfe706ca4cf5e9c5453e9f7cfd2b8b4c8d169a44e55c88d4a9a7f9474241e221af44860018ab0856972e194cd934")
    static let split = [hex("c7000000010882cd9299b2d65bf2084bbc0e3d5ff5347a004496f6f2b4bd81ba6cf433982663b654fa5620d544fd87a6655d6f18e58ef91c1da0dbf309129bb509e7881e4ec0fa395c7b39423387dee119d446f9164cdd6511f2e1848110cb3f76e54b3ecce7103203f9f3097c454977633ab4b71faf0b30ced62bec74517f8b08f5e6deee7e99fcfcdbf36be5949f35cc5f4df3f1bfa589c2267a0574dc1e9ba16a0773a8983e1c3e1e8de319d8d1f45a16a9fb485d45966e8fe9884576b3ba36fb33224f0778d7f75447e87883d2859443e7a697148a0f7f4d14fa35209a582af12adc5ddc6bd4be3b63fa3f1c6f07a99490399a35c626aa217ac6952fa01dde9441dca51d01f5b3c3af27524bb3752d000c70a9ff256b5d3aeb9ca227dcb8c50bab1b07108fc6b424ea1b3c10e5c77ba6aceef231fca36a22c9c3caf660b5e4532ec865071d7ab9b30044cf2582059ddab843453b4c05d2ff5c32e93bdc3646eb59c446359d88b41c26b0ddf31e1fb433b096741941ef3235e88e732f366d66a5f21d925524e6e4c7b27bf8b2f70c7a9b1cd24a081c7b6e7d83426f8293d82afebf561be92bac039a45f4e0f07cfaf852d33a553327fc9e22d9e36f76b2427defd0b669c7fd580ea1cfaa418e454196a025606f0085844ac6ce82e9b7389a5711e8aaa31420a41d287d849d12d70234fba9114f5adc32120b4c70d6f925f7e0ff39e995cde65f41b94393ed3545b16f892fef086df7b8f3d238e2b563642514fc3d9385f77e2c2cdeb7d313cc37b1121f70c4c3d201883f9332da6d098bfebd496cdc9d94e8a887316913d5d298381d9afa170bb9c306bba854ad45b7ab61a77555202c3598ebe7dd799a06be6c55640e3726ac1516d30d49d2fd851edda4d61488e70f2d8a7263dbacf3d31746caed99ca4b96ad71cba6a13e3b500484aa6732ce54543311444458aff9298d3e7a0e5c3d3d8a7df2f715812ea8b8dcb38a02bbf77d328ce9ca75f48374c11c33a64040f82525218f490e09428687a1c323d200f30a2712c8b2f8153c6d2d8be54bd399af06c292a5365ad1f7059b0a7de755f1f4adf5d1a2fdd5763de0020d159280cc75a37ac44776061e597eacb9b911deb754937254d15bef6689ab68f4d63ac8e89f1afb21a1760b70944e089d0c66b67c0046d0541aca58e2c1aaef12f41d8b3fc6fff17fe117ce611cd0e60b50a5782bfe1b2ac1146241473d807d7f47ca47e6fe09055efd4438501cdba8b9bfcbbf730d379e1a432aef3d754b39da335d4e255cb022e6fd2fe2063d6397e86f7756660c7bda8bbb17a7e4724c0d1c1d6de8b2c8a12ee3009e306a429425d56b0b6aefcd1404ca82b1b6472f917391c843d744f1025c9aa3abd073256baf87d320892d6de0034098bf9ecdf84f906e5e46b51aafb4b4660d922765cb36bf110cb875b1421b5da4bcbe2e4bf76998c215c4ebb7fe7b16eaab81ee354244b11b70a9861222cd949e392176d004710fb95084395c2d7f2910f9a379f1d0e54ac69b354bdaf2533214e0c3f0b96509e7a541377b9b7b0c2583979ee4eec5cffed17bbb686b8636d43fba114901e40f438def9ed3a433343d18c5021fac35349d89ec3c5f7d8668b93c249f0cd43d75f966d073557d6bdb2cdaef77a9eac159e817797dd57445d28789ee8a3de1b9e3efc03a02"), hex("cf000000010882cd9299b2d65bf2084bbc0e3d5ff5347a0043dfd03de01e32753647a6d61fe2042ef41d0bc955c36c3fcdc12f46e81e129dcba066d844fd30e79a08154d15c0fc7da7e9998fc4d50a7711112ed6f35b2019dd276f3fc5586c40245a46690d5c3ccd97cc2fdde4e62e9e1f95e51eecd27cab3b06bad69bf6f561d49c8c0ea62bde8027f1c708327543c79ac4f2c96e591dc4513cdf161716cc0a9468d9c8e6fa064fd1f1e5d6545b6b877046e408b3477283faeda81937473a4dc10172bb32de1aaeaf59e81f3f38a9fbf7bf804eb10343f9cd753db0aa2ce3be7be17e7114d45a5f50671deec4c8d3e0ba75f160d63a429e7805f30aae8b5b090e7b6e3ddb9d0b62fd821d7d6a228c591a24d24f764e44ba1529c22f80517d7073bc9300596f696680b8b3243cb9302dc8f12f36af20a51995dc3a0f3fca5e32e9c58d901fad054a6c46327c49156e3dd170e2a5226f2f089ebf5ec3461704c76312dde571c432e937ae4382723a4a814e99c4e5c5dfcc24a5bebe05bd7ea10f447e91a59c4c060fbd385fba6607612384ed1f77bb1c796e71f130b79c68a9918080716de2ef6baeded71e3f41ce07e0ad48ecb93ed14dffbd4074427633daa142933334d18f2f37c387ac501ada623f5bdaca711a28b5817f2537ff35c1766092bcf79eeca73ffe806febfc3d489157a18a042fe3ad3ac047c2db88683c6876b2eada4d01a3a0980eff80d15a2b9f1784c99e4e40772d7df323622f572423e854702833645450b085627945d67aae668c416d7e54477181fb83323641c1498feedc1030471255e29e98a48a39c7b44e51fc32db075ea9d644b35c39dcbca12110138c0fb5ada20206b35a16843c69d53cc0d2a2b58d86c60aa1246112a02a45a936f2067d2287aebdeb4ca40f0c05593b92f51f421bfacd5481312d645b56528dcece30ee28761e78b940f356ab9f28e16b80ba9e26d17ac6f79e5c1ed41cf70d4eca8f434880a789d4607ce3f9f2a4f6e4e4ade26e1e1543c6f948ae5fe55d6b8ab486cf67dc48b794736947c5a0dc940bc29e76f528e08a0bd81f93459c9a78e69099b096acffd0eeeb1cb551131dc4d7b27b1d177cd907bb7cad060870f4cef19383c5ea5bed977745c5be97265286fc2fe5d41fa9f1b7ac23fbc74c45acb855f0f208e98ea1413a09d575f3f7dda2550443d62556df16a10ccd3591fb13960622cda81034858809883718d6f5ed644b5b6375971ab4d4bf210f4a1867acc57810c8853e0b95267ef9c00697e1d207f9bbea48e5e2a0b5e033b739cd581209fb3d782647e2148469093fec9ef12f93efbedfab98934594f413be3243b8300030a3739ef0223ddd59b41c17dd721d457b4807a78d25f8da7b0b89168d2e4840578ec5ddca4f0ae8e2cb8ea8b0726e6d4cbb951cab51816e000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000")]

    /// A NameRouter stack (a name may decide every flow) with its own writer and input.
    func quicStack(_ h: Harness, named: TestOutbound, other: TestOutbound, match: String) -> (Netstack, NameRouter, Int) {
        let router = NameRouter(named: named, other: other, match: match)
        let ns = Netstack(loop: h.loop, router: router, settings: sniffing())
        return (ns, router, ns.addInput(mtu: 1500, writer: TestWriter()))
    }

    func testQUICInitialRoutesTheConversationByName() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        let named = TestOutbound(), other = TestOutbound()
        let (ns, router, input) = quicStack(h, named: named, other: other, match: "example.com")
        let app = Endpoint(IPAddress("10.0.0.2")!, 50000), server = Endpoint(IPAddress("93.184.216.34")!, 443)
        udpPacket(from: app, to: server, payload: Self.rfc9001).withUnsafeBytes { ns.input($0, from: input) }
        udpPacket(from: app, to: server, payload: [0x40, 1, 2, 3]).withUnsafeBytes { ns.input($0, from: input) }
        XCTAssertEqual(router.requests.count, 1)
        XCTAssertEqual(router.requests.first?.name, "example.com")
        XCTAssertEqual(other.associations.count, 0)
        let sent = named.associations.first?.sent ?? []
        XCTAssertEqual(sent.map(\.payload), [Self.rfc9001, [0x40, 1, 2, 3]], "in order, unchanged")
        XCTAssertEqual(sent.first?.to, .ip(server), "datagrams go to the app's address")
        XCTAssertEqual(ns.counters.sniffed, 1)
        XCTAssertEqual(ns.flowSnapshot().first?.name, "example.com")
        XCTAssertEqual(ns.flowSnapshot().first?.nameSource, "quic")
        ns.shutdown()
    }

    func testQUICHelloInTwoDatagramsIsHeldUntilWhole() {
        let h = Harness(settings: sniffing())
        defer { h.shutdown() }
        let named = TestOutbound(), other = TestOutbound()
        let (ns, router, input) = quicStack(h, named: named, other: other, match: "split.loft.test")
        let app = Endpoint(IPAddress("10.0.0.2")!, 50001), server = Endpoint(IPAddress("93.184.216.34")!, 443)
        udpPacket(from: app, to: server, payload: Self.split[0]).withUnsafeBytes { ns.input($0, from: input) }
        XCTAssertEqual(router.requests.count, 0, "half a hello: held")
        XCTAssertEqual(named.associations.count + other.associations.count, 0)
        udpPacket(from: app, to: server, payload: Self.split[1]).withUnsafeBytes { ns.input($0, from: input) }
        XCTAssertEqual(router.requests.first?.name, "split.loft.test")
        XCTAssertEqual(named.associations.first?.sent.map(\.payload), Self.split)
        ns.shutdown()
    }

    func testQUICWaitEndsByAddress() {
        let h = Harness(settings: sniffing(waitMs: 300), clock: VirtualClock())
        defer { h.shutdown() }
        let named = TestOutbound(), other = TestOutbound()
        let (ns, router, input) = quicStack(h, named: named, other: other, match: "split.loft.test")
        let app = Endpoint(IPAddress("10.0.0.2")!, 50002), server = Endpoint(IPAddress("93.184.216.34")!, 443)
        udpPacket(from: app, to: server, payload: Self.split[0]).withUnsafeBytes { ns.input($0, from: input) }
        h.loop.advance(by: .milliseconds(350))
        XCTAssertEqual(router.requests.count, 1)
        XCTAssertNil(router.requests.first?.name)
        XCTAssertEqual(other.associations.first?.sent.map(\.payload), [Self.split[0]])
        XCTAssertEqual(ns.counters.sniffTimedOut, 1)
        // Not QUIC: routed at once.
        udpPacket(from: app, to: Endpoint(IPAddress("93.184.216.34")!, 53), payload: [1, 2, 3]).withUnsafeBytes { ns.input($0, from: input) }
        XCTAssertEqual(router.requests.count, 2)
        ns.shutdown()
    }

    // MARK: names from DNS answers

    /// A response for www.example.org A: 93.184.216.34, TTL 300.
    static let dnsAnswer: [UInt8] = [0, 7, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0,
                                     3, 0x77, 0x77, 0x77, 7, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 3, 0x6f, 0x72, 0x67, 0,
                                     0, 1, 0, 1,
                                     0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 1, 0x2C, 0, 4, 93, 184, 216, 34]

    func testDNSAnswerNamesLaterFlows() throws {
        let h = Harness(settings: sniffing(), clock: VirtualClock())
        defer { h.shutdown() }
        let dns = Endpoint(IPAddress("198.18.0.2")!, 53), app = Endpoint(IPAddress("10.0.0.2")!, 41000)
        h.send(udpPacket(from: app, to: dns, payload: [0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]))
        let assoc = try XCTUnwrap(h.outbound.associations.first)
        assoc.reply(Self.dnsAnswer, from: dns)
        h.turn()
        XCTAssertEqual(h.netstack.dnsNamesLearned, 1)
        // SSH (a skipped port) to the address: routed at the SYN by the name, dialled to the address.
        var ssh = AppTCP(local: appV4, remote: Endpoint(IPAddress("93.184.216.34")!, 22))
        h.send(ssh.syn())
        XCTAssertEqual(h.router.requests.last?.name, "www.example.org")
        XCTAssertEqual(h.outbound.streams.first?.destination, .ip(ssh.remote))
        XCTAssertEqual(h.netstack.flowSnapshot().first { $0.network == .tcp }?.nameSource, "dns")
        // An hour later the name is forgotten.
        h.loop.advance(by: .seconds(3601))
        var later = AppTCP(local: Endpoint(appV4.address, 40009), remote: Endpoint(IPAddress("93.184.216.34")!, 22))
        h.send(later.syn())
        XCTAssertNil(h.router.requests.last?.name)
    }
}
