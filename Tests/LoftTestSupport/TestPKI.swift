import Foundation
import LoftCarriers
import LoftTLS

/// A throwaway PKI made once per test process by Tests/interop/gen-certs.sh (openssl CLI): a CA,
/// a server certificate for front.test, localhost and 127.0.0.1 signed by it, and an unrelated CA.
/// Shared by every test target that needs TLS.
public struct TestPKI: Sendable {
    public let dir: String
    public var ca: String { dir + "/ca.pem" }
    public var otherCA: String { dir + "/other-ca.pem" }
    public var cert: String { dir + "/server.pem" }
    public var key: String { dir + "/server.key" }
    public var server: TLSServerOptions { TLSServerOptions(certificateFile: cert, keyFile: key) }

    /// The repository root (this file is Tests/LoftTestSupport/TestPKI.swift).
    public static let repo: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }()

    public static let shared: TestPKI = {
        let dir = NSTemporaryDirectory() + "loft-test-pki-\(getpid())"
        let out = runTool("/bin/bash", [repo + "/Tests/interop/gen-certs.sh", dir])
        precondition(out.status == 0, "gen-certs.sh failed: \(out.output)")
        atexit { try? FileManager.default.removeItem(atPath: NSTemporaryDirectory() + "loft-test-pki-\(getpid())") }
        return TestPKI(dir: dir)
    }()
}

/// Runs a tool to completion (not on the loop).
public func runTool(_ path: String, _ args: [String]) -> (status: Int32, output: String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: path)
    p.arguments = args
    let pipe = Pipe()
    p.standardOutput = pipe
    p.standardError = pipe
    do { try p.run() } catch { return (-1, "\(error)") }
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: data, as: UTF8.self))
}
