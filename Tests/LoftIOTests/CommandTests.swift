import XCTest
import LoftIO

final class CommandTests: XCTestCase {
    func testExitStatusIsReported() throws {
        XCTAssertEqual(try Command.run(["true"]), 0)
        XCTAssertEqual(try Command.run(["false"], allowFailure: true), 1)
        XCTAssertThrowsError(try Command.run(["sh", "-c", "echo boom >&2; exit 3"]))
    }
}
