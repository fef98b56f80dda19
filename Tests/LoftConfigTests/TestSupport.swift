import XCTest
import LoftCore
@testable import LoftConfig

/// Parses `text` as "test.yaml" and fails the test if that throws.
func parseOK(_ text: String, baseDirectory: String = ".", file: StaticString = #filePath,
             line: UInt = #line) -> Configuration? {
    do {
        return try ConfigLoader.parse(text, file: "test.yaml", baseDirectory: baseDirectory)
    } catch {
        XCTFail("unexpected error: \(error)", file: file, line: line)
        return nil
    }
}

/// Parses `text` and returns the error it must produce.
func parseError(_ text: String, baseDirectory: String = ".", file: StaticString = #filePath,
                line: UInt = #line) -> ConfigError? {
    do {
        let config = try ConfigLoader.parse(text, file: "test.yaml", baseDirectory: baseDirectory)
        XCTFail("expected an error, got \(config)", file: file, line: line)
        return nil
    } catch {
        return error
    }
}

/// Asserts that `text` fails at `line`:`column` of test.yaml with a message containing each of
/// `fragments`.
func assertError(_ text: String, at expectedLine: Int, _ expectedColumn: Int, _ fragments: String...,
                 baseDirectory: String = ".", file: StaticString = #filePath, line: UInt = #line) {
    guard let error = parseError(text, baseDirectory: baseDirectory, file: file, line: line) else { return }
    XCTAssertEqual(error.position, SourcePosition(file: "test.yaml", line: expectedLine, column: expectedColumn),
                   "error was: \(error)", file: file, line: line)
    for fragment in fragments {
        XCTAssertTrue(error.message.contains(fragment), "\"\(error.message)\" lacks \"\(fragment)\"",
                      file: file, line: line)
    }
    XCTAssertTrue(error.description.hasPrefix("test.yaml:\(expectedLine):\(expectedColumn): "),
                  error.description, file: file, line: line)
}

func ip(_ text: String) -> IPAddress { IPAddress(text)! }
func prefix(_ text: String) -> IPPrefix { IPPrefix(text)! }
func endpoint(_ text: String) -> Endpoint { Endpoint(text)! }
func at(_ line: Int, _ column: Int, _ file: String = "test.yaml") -> SourcePosition {
    SourcePosition(file: file, line: line, column: column)
}

/// A fresh temporary directory, removed at the end of the test.
func temporaryDirectory(_ test: XCTestCase) -> String {
    var template = Array("/tmp/loftconfig-XXXXXX".utf8CString)
    let path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
    test.addTeardownBlock {
        _ = try? FileManager.default.removeItem(atPath: path)
    }
    return path
}

func writeFile(_ path: String, _ contents: String) {
    XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(contents.utf8)), path)
}
