import XCTest
import LoftCore
@testable import LoftInputs

final class Socks5GreetingTests: XCTestCase {
    typealias G = Socks5.Greeting

    func testNoAuthenticationOffered() {
        XCTAssertEqual(G.parse([5, 1, 0]), .complete(G(methodCount: 1, offersNoAuthentication: true), length: 3))
        XCTAssertEqual(G.parse([5, 3, 2, 1, 0]), .complete(G(methodCount: 3, offersNoAuthentication: true), length: 5))
    }

    func testOnlyOtherMethods() {
        // username/password (0x02) and GSSAPI (0x01) only: complete, but nothing acceptable.
        XCTAssertEqual(G.parse([5, 2, 2, 1]), .complete(G(methodCount: 2, offersNoAuthentication: false), length: 4))
    }

    func testZeroMethodsIsCompleteAndOffersNothing() {
        XCTAssertEqual(G.parse([5, 0]), .complete(G(methodCount: 0, offersNoAuthentication: false), length: 2))
    }

    func testIncompleteAtEveryPrefix() {
        let full: [UInt8] = [5, 3, 2, 1, 0]
        for n in 0..<full.count {
            XCTAssertEqual(G.parse(Array(full.prefix(n))), .incomplete, "prefix \(n)")
        }
    }

    func testBytesAfterTheGreetingAreNotConsumed() {
        // A client that sends its request right behind the greeting.
        XCTAssertEqual(G.parse([5, 1, 0, 5, 1, 0, 1]), .complete(G(methodCount: 1, offersNoAuthentication: true), length: 3))
    }

    func testWrongVersion() {
        XCTAssertEqual(G.parse([4, 1, 0]), .malformed(.version(4)))
        XCTAssertEqual(G.parse([0]), .malformed(.version(0)))
        XCTAssertEqual(G.parse([0x47, 0x45, 0x54]), .malformed(.version(0x47)))  // "GET"
        XCTAssertNil(Socks5.Malformed.version(4).reply, "a bad version is closed without a reply")
    }

    func testMethodSelection() {
        XCTAssertEqual(Socks5.methodSelection(Socks5.methodNoAuthentication), [5, 0x00])
        XCTAssertEqual(Socks5.methodSelection(Socks5.methodNoAcceptable), [5, 0xFF])
    }

    func testLongestGreeting() {
        var g: [UInt8] = [5, 255]
        g += [UInt8](repeating: 2, count: 254) + [0]
        XCTAssertEqual(g.count, Socks5.maxGreetingLength)
        XCTAssertEqual(G.parse(g), .complete(G(methodCount: 255, offersNoAuthentication: true), length: 257))
    }
}

final class Socks5RequestTests: XCTestCase {
    typealias R = Socks5.Request

    func ep(_ s: String) -> Endpoint { Endpoint(s)! }

    func testConnectIPv4() {
        let bytes: [UInt8] = [5, 1, 0, 1, 198, 18, 1, 2, 0, 80]
        XCTAssertEqual(R.parse(bytes), .complete(R(command: .connect, destination: .ip(ep("198.18.1.2:80"))), length: 10))
    }

    func testConnectIPv6() {
        let bytes: [UInt8] = [5, 1, 0, 4, 0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0x1F, 0x90]
        XCTAssertEqual(R.parse(bytes), .complete(R(command: .connect, destination: .ip(ep("[fd00:1::2]:8080"))), length: 22))
    }

    func testConnectDomain() {
        let name = Array("srv.loft.test".utf8)
        let bytes: [UInt8] = [5, 1, 0, 3, UInt8(name.count)] + name + [0x01, 0xBB]
        XCTAssertEqual(R.parse(bytes), .complete(R(command: .connect, destination: .domain("srv.loft.test", 443)), length: bytes.count))
    }

    func testDomainThatIsAnAddressLiteralBecomesAnAddress() {
        for (text, want) in [("198.18.1.2", "198.18.1.2:80"), ("fd00:1::2", "[fd00:1::2]:80"), ("[fd00:1::2]", "[fd00:1::2]:80")] {
            let name = Array(text.utf8)
            let bytes: [UInt8] = [5, 1, 0, 3, UInt8(name.count)] + name + [0, 80]
            XCTAssertEqual(R.parse(bytes), .complete(R(command: .connect, destination: .ip(ep(want))), length: bytes.count), text)
        }
    }

    func testUDPAssociate() {
        let bytes: [UInt8] = [5, 3, 0, 1, 0, 0, 0, 0, 0, 0]
        XCTAssertEqual(R.parse(bytes), .complete(R(command: .udpAssociate, destination: .ip(ep("0.0.0.0:0"))), length: 10))
    }

    func testBindIsNotSupported() {
        let bytes: [UInt8] = [5, 2, 0, 1, 127, 0, 0, 1, 0, 80]
        XCTAssertEqual(R.parse(bytes), .malformed(.command(2)))
        XCTAssertEqual(Socks5.Malformed.command(2).reply, .commandNotSupported)
    }

    func testUnknownCommands() {
        for cmd: UInt8 in [0, 4, 9, 0x80, 0xFF] {
            XCTAssertEqual(R.parse([5, cmd, 0, 1, 127, 0, 0, 1, 0, 80]), .malformed(.command(cmd)), "cmd \(cmd)")
        }
    }

    func testCommandIsJudgedOnlyOnceTheWholeRequestIsThere() {
        // So that the 0x07 reply follows a fully read request (no reset eats the reply).
        XCTAssertEqual(R.parse([5, 2, 0, 1, 127, 0]), .incomplete)
    }

    func testUnknownAddressTypes() {
        for atyp: UInt8 in [0, 2, 5, 0xFF] {
            XCTAssertEqual(R.parse([5, 1, 0, atyp]), .malformed(.addressType(atyp)), "atyp \(atyp)")
            XCTAssertEqual(R.parse([5, 1, 0, atyp, 1, 2, 3, 4, 5, 6]), .malformed(.addressType(atyp)))
        }
        XCTAssertEqual(Socks5.Malformed.addressType(5).reply, .addressTypeNotSupported)
        // The address type is judged before the command.
        XCTAssertEqual(R.parse([5, 2, 0, 9]), .malformed(.addressType(9)))
    }

    func testWrongVersion() {
        XCTAssertEqual(R.parse([4, 1, 0, 1, 127, 0, 0, 1, 0, 80]), .malformed(.version(4)))
        XCTAssertEqual(R.parse([0]), .malformed(.version(0)))
    }

    func testEmptyDomain() {
        XCTAssertEqual(R.parse([5, 1, 0, 3, 0, 0, 80]), .malformed(.domainName))
        XCTAssertEqual(Socks5.Malformed.domainName.reply, .generalFailure)
    }

    func testDomainWithControlOrSpaceBytes() {
        for bad: [UInt8] in [[0x61, 0x00, 0x62], [0x61, 0x20, 0x62], [0x0A], [0x61, 0x7F], [0xC3, 0xA9]] {
            let bytes: [UInt8] = [5, 1, 0, 3, UInt8(bad.count)] + bad + [0, 80]
            XCTAssertEqual(R.parse(bytes), .malformed(.domainName), "\(bad)")
        }
    }

    func testLongestDomain() {
        let name = [UInt8](repeating: 0x61, count: 255)
        let bytes: [UInt8] = [5, 1, 0, 3, 255] + name + [0, 80]
        XCTAssertEqual(bytes.count, Socks5.maxRequestLength)
        XCTAssertEqual(R.parse(bytes), .complete(R(command: .connect, destination: .domain(String(repeating: "a", count: 255), 80)), length: 262))
    }

    func testIncompleteAtEveryPrefix() {
        let name = Array("example.org".utf8)
        let requests: [[UInt8]] = [
            [5, 1, 0, 1, 198, 18, 1, 2, 0, 80],
            [5, 1, 0, 4] + [UInt8](repeating: 0, count: 15) + [1, 0, 80],
            [5, 1, 0, 3, UInt8(name.count)] + name + [0, 80],
        ]
        for r in requests {
            for n in 0..<r.count {
                XCTAssertEqual(R.parse(Array(r.prefix(n))), .incomplete, "prefix \(n) of \(r)")
            }
            guard case .complete(_, let length) = R.parse(r) else { return XCTFail("\(r)") }
            XCTAssertEqual(length, r.count)
        }
    }

    func testBytesAfterTheRequestAreNotConsumed() {
        // Optimistic data right behind the request is the first payload, not part of it.
        let bytes: [UInt8] = [5, 1, 0, 1, 198, 18, 1, 2, 0, 80] + Array("GET / HTTP/1.1\r\n".utf8)
        XCTAssertEqual(R.parse(bytes), .complete(R(command: .connect, destination: .ip(ep("198.18.1.2:80"))), length: 10))
    }

    func testReservedByteIsNotChecked() {
        XCTAssertEqual(R.parse([5, 1, 0x7F, 1, 198, 18, 1, 2, 0, 80]),
                       .complete(R(command: .connect, destination: .ip(ep("198.18.1.2:80"))), length: 10))
    }

    func testEncodedRoundTrip() {
        for r in [R(command: .connect, destination: .ip(ep("198.18.1.2:80"))),
                  R(command: .connect, destination: .ip(ep("[fd00:1::2]:443"))),
                  R(command: .connect, destination: .domain("srv.loft.test", 8080)),
                  R(command: .udpAssociate, destination: .ip(ep("0.0.0.0:0")))] {
            let bytes = r.encoded
            XCTAssertEqual(R.parse(bytes), .complete(r, length: bytes.count))
        }
    }
}

final class Socks5ReplyTests: XCTestCase {
    func testEveryOutboundFailureMapsToItsReplyCode() {
        let cases: [(FlowFailure, Socks5.ReplyCode, UInt8)] = [
            (.refused, .connectionRefused, 0x05),
            (.hostUnreachable, .hostUnreachable, 0x04),
            (.networkUnreachable, .networkUnreachable, 0x03),
            (.timedOut, .ttlExpired, 0x06),
            (.notAllowed, .notAllowed, 0x02),
            (.resolveFailed, .hostUnreachable, 0x04),
            (.other(EIO), .generalFailure, 0x01),
            (.other(0), .generalFailure, 0x01),
        ]
        for (failure, code, byte) in cases {
            XCTAssertEqual(Socks5.ReplyCode(failure), code, "\(failure)")
            XCTAssertEqual(Socks5.ReplyCode(failure).rawValue, byte, "\(failure)")
        }
    }

    func testErrnoToReplyCode() {
        // The chain the direct outbound takes: connect errno → FlowFailure → REP.
        XCTAssertEqual(Socks5.ReplyCode(FlowFailure(errno: ECONNREFUSED)).rawValue, 0x05)
        XCTAssertEqual(Socks5.ReplyCode(FlowFailure(errno: EHOSTUNREACH)).rawValue, 0x04)
        XCTAssertEqual(Socks5.ReplyCode(FlowFailure(errno: ENETUNREACH)).rawValue, 0x03)
        XCTAssertEqual(Socks5.ReplyCode(FlowFailure(errno: ETIMEDOUT)).rawValue, 0x06)
        XCTAssertEqual(Socks5.ReplyCode(FlowFailure(errno: EACCES)).rawValue, 0x02)
        XCTAssertEqual(Socks5.ReplyCode(FlowFailure(errno: EPIPE)).rawValue, 0x01)
    }

    func testReplyCodeValues() {
        XCTAssertEqual(Socks5.ReplyCode.allCases.map(\.rawValue), Array(0...8))
    }

    func testReplyIPv4() {
        XCTAssertEqual(Socks5.reply(.succeeded, bound: Endpoint("127.0.0.1:11080")!), [5, 0, 0, 1, 127, 0, 0, 1, 0x2B, 0x48])
        XCTAssertEqual(Socks5.reply(.connectionRefused), [5, 5, 0, 1, 0, 0, 0, 0, 0, 0])
    }

    func testReplyIPv6() {
        let r = Socks5.reply(.succeeded, bound: Endpoint("[fd00:1::1]:40000")!)
        XCTAssertEqual(r, [5, 0, 0, 4, 0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x9C, 0x40])
        XCTAssertEqual(r.count, Socks5.maxReplyLength)
    }

    func testReplyParsesBack() {
        for code in Socks5.ReplyCode.allCases {
            let bytes = Socks5.reply(code, bound: Endpoint("10.1.2.3:99")!)
            guard case .complete(let m, let length) = bytes.withUnsafeBytes({ Socks5.parseReply($0) }) else {
                return XCTFail("\(code)")
            }
            XCTAssertEqual(m.code, code.rawValue)
            XCTAssertEqual(m.bound, .ip(Endpoint("10.1.2.3:99")!))
            XCTAssertEqual(length, 10)
        }
    }

    func testMalformedReplies() {
        XCTAssertEqual(Socks5.Malformed.version(1).reply, nil)
        XCTAssertEqual(Socks5.Malformed.command(2).reply?.rawValue, 0x07)
        XCTAssertEqual(Socks5.Malformed.addressType(9).reply?.rawValue, 0x08)
        XCTAssertEqual(Socks5.Malformed.domainName.reply?.rawValue, 0x01)
        XCTAssertEqual(Socks5.Malformed.truncated.reply?.rawValue, 0x01)
    }
}

final class Socks5UDPHeaderTests: XCTestCase {
    typealias H = Socks5.UDPHeader

    func testIPv4() {
        let bytes: [UInt8] = [0, 0, 0, 1, 198, 18, 1, 2, 0, 53, 0xAA, 0xBB]
        XCTAssertEqual(H.parse(bytes), .complete(H(fragment: 0, destination: .ip(Endpoint("198.18.1.2:53")!), length: 10), length: 10))
    }

    func testIPv6() {
        let bytes: [UInt8] = [0, 0, 0, 4, 0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 53]
        XCTAssertEqual(H.parse(bytes), .complete(H(fragment: 0, destination: .ip(Endpoint("[fd00:1::2]:53")!), length: 22), length: 22))
    }

    func testDomain() {
        let name = Array("probe.loft.test".utf8)
        let bytes: [UInt8] = [0, 0, 0, 3, UInt8(name.count)] + name + [0, 53] + [1, 2, 3]
        XCTAssertEqual(H.parse(bytes), .complete(H(fragment: 0, destination: .domain("probe.loft.test", 53), length: 22), length: 22))
    }

    func testFragmentIsReadFirst() {
        XCTAssertEqual(H.fragmentByte([0, 0, 1, 1]), 1)
        XCTAssertEqual(H.fragmentByte([0, 0, 0x81, 9, 9]), 0x81)
        XCTAssertEqual(H.fragmentByte([0, 0, 0]), nil)
        guard case .complete(let h, _) = H.parse([0, 0, 2, 1, 1, 2, 3, 4, 0, 53]) else { return XCTFail() }
        XCTAssertEqual(h.fragment, 2)
    }

    func testTruncated() {
        let full: [UInt8] = [0, 0, 0, 1, 198, 18, 1, 2, 0, 53]
        for n in 0..<full.count {
            XCTAssertEqual(H.parse(Array(full.prefix(n))), .malformed(.truncated), "prefix \(n)")
        }
        XCTAssertEqual(H.parse([0, 0, 0, 3, 10, 0x61, 0x62]), .malformed(.truncated))
        XCTAssertEqual(H.parse([0, 0, 0, 4] + [UInt8](repeating: 0, count: 17)), .malformed(.truncated))
    }

    func testUnknownAddressTypeAndBadName() {
        XCTAssertEqual(H.parse([0, 0, 0, 7, 1, 2, 3, 4, 0, 53]), .malformed(.addressType(7)))
        XCTAssertEqual(H.parse([0, 0, 0, 3, 0, 0, 53]), .malformed(.domainName))
    }

    func testEmptyPayloadIsFine() {
        let bytes: [UInt8] = [0, 0, 0, 1, 198, 18, 1, 2, 0, 53]
        guard case .complete(let h, _) = H.parse(bytes) else { return XCTFail() }
        XCTAssertEqual(h.length, bytes.count)
    }

    func testWrite() {
        XCTAssertEqual(H.encode(.ip(Endpoint("198.18.1.2:53")!), payload: [9]), [0, 0, 0, 1, 198, 18, 1, 2, 0, 53, 9])
        XCTAssertEqual(H.encode(.ip(Endpoint("[fd00:1::2]:53")!)).count, 22)
        let d = H.encode(.domain("a.b", 53))
        XCTAssertEqual(d, [0, 0, 0, 3, 3, 0x61, 0x2E, 0x62, 0, 53])
        XCTAssertEqual(H.parse(d), .complete(H(fragment: 0, destination: .domain("a.b", 53), length: 10), length: 10))
    }
}
