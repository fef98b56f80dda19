import LoftCore
import LoftIO
import XCTest
@testable import LoftOutbounds

/// A datagram association that records what is sent and lets the test answer.
final class RecordingAssociation: DatagramAssociation {
    weak var events: DatagramEvents?
    var sent: [([UInt8], Destination)] = []
    var closed = false
    func send(_ payload: UnsafeRawBufferPointer, to: Destination) -> Bool {
        guard !closed else { return false }
        sent.append((Array(payload), to))
        return true
    }
    func close() { closed = true }
    func reply(_ bytes: [UInt8], from: Endpoint) { bytes.withUnsafeBytes { events?.datagramReceived($0, from: from) } }
}

/// sstp's lookups over the link (`LinkLookup`): the query to the IPCP DNS servers, answers only
/// from them and with the query's id, retries alternating servers, the end in time.
final class LinkLookupTests: XCTestCase {
    let dns1 = IPAddress("198.19.1.1")!, dns2 = IPAddress("198.19.1.53")!

    func answer(to query: [UInt8], address: [UInt8]) -> [UInt8] {
        var a = query
        a[2] = 0x81; a[3] = 0x80; a[7] = 1   // a response, recursion available, one answer
        return a + [0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4] + address
    }

    func testAnswerFromTheServerWithTheId() throws {
        let loop = try EventLoop()
        let assoc = RecordingAssociation()
        var got: [DNSWire.Answer?] = []
        let l = try XCTUnwrap(LinkLookup(loop: loop, name: "svc.loft.test", servers: [dns1, dns2], association: assoc,
                                         retryMs: 50, completion: { got.append($0) }))
        XCTAssertTrue(l.start())
        XCTAssertEqual(assoc.sent.count, 1)
        guard let (q, to) = assoc.sent.first else { return }
        XCTAssertEqual(to, .ip(Endpoint(dns1, 53)))
        XCTAssertEqual(Array(q.suffix(4)), [0, 1, 0, 1], "an A query")
        let good = answer(to: q, address: [198, 19, 1, 7])
        assoc.reply(good, from: Endpoint(IPAddress("198.19.1.9")!, 53))   // not a server of the link
        var wrongID = good; wrongID[1] ^= 0xFF
        assoc.reply(wrongID, from: Endpoint(dns1, 53))
        XCTAssertTrue(got.isEmpty)
        assoc.reply(good, from: Endpoint(dns1, 53))
        XCTAssertEqual(got, [.addresses([IPAddress("198.19.1.7")!], ttl: 60)])
        XCTAssertTrue(assoc.closed)
        assoc.reply(good, from: Endpoint(dns1, 53))
        XCTAssertEqual(got.count, 1, "once")
        XCTAssertFalse(LinkLookup(loop: loop, name: String(repeating: "a", count: 70) + ".test", servers: [dns1],
                                  association: RecordingAssociation(), completion: { _ in })!.start(), "a name DNS cannot carry")
    }

    func testRetriesThenGivesUp() throws {
        let loop = try EventLoop()
        let assoc = RecordingAssociation()
        var got: [DNSWire.Answer?] = []
        let l = try XCTUnwrap(LinkLookup(loop: loop, name: "svc.loft.test", servers: [dns1, dns2], association: assoc,
                                         retryMs: 20, completion: { got.append($0) }))
        XCTAssertTrue(l.start())
        let failed = loop.run(steps: [{ !got.isEmpty }], seconds: 3)
        XCTAssertNil(failed)
        XCTAssertEqual(got.count, 1)
        XCTAssertNil(got.first ?? .notFound, "no answer in time")
        XCTAssertEqual(assoc.sent.map { $0.1 }, [.ip(Endpoint(dns1, 53)), .ip(Endpoint(dns2, 53)), .ip(Endpoint(dns1, 53)), .ip(Endpoint(dns2, 53))])
        XCTAssertTrue(assoc.closed)
    }
}
