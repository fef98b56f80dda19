@testable import LoftCarriers
import LoftCore
import LoftTLS
import XCTest

/// The order and the error a dial reports when a front's name has several addresses.
final class DialAddressesTests: XCTestCase {
    private let a = Endpoint(IPAddress("192.0.2.1")!, 443)
    private let b = Endpoint(IPAddress("192.0.2.2")!, 443)
    private let c = Endpoint(IPAddress("2001:db8::1")!, 443)

    func testAddressesComeInTheGivenOrderAndTheLastFailureIsKept() {
        var d = DialAddresses([a, b, c])
        XCTAssertEqual(d.remaining, 3)
        XCTAssertEqual(d.next(), a)
        XCTAssertEqual(d.lastError, "no address")
        XCTAssertEqual(d.next(failed: "192.0.2.1:443: Connection refused"), b)
        XCTAssertEqual(d.remaining, 1)
        XCTAssertEqual(d.next(failed: "192.0.2.2:443: no QUIC handshake within 1000 ms"), c)
        XCTAssertEqual(d.remaining, 0)
        XCTAssertNil(d.next(failed: "[2001:db8::1]:443: Network is unreachable"))
        XCTAssertEqual(d.lastError, "[2001:db8::1]:443: Network is unreachable")
        XCTAssertNil(d.next())
        XCTAssertEqual(d.lastError, "[2001:db8::1]:443: Network is unreachable")
    }

    func testNoAddressFailsAtOnce() {
        var d = DialAddresses([])
        XCTAssertEqual(d.remaining, 0)
        XCTAssertNil(d.next())
        XCTAssertEqual(d.lastError, "no address")
    }
}
