import LoftControl
import LoftCore
import LoftIO

/// `loft capture`: asks the running loft for a capture over its control socket and copies the
/// pcapng stream to a file or stdout until loft ends it (count, duration) or the user does
/// (Ctrl-C, SIGTERM: loft is told, writes its statistics and closes; docs/capture.md).
enum CaptureCommand {
    static let flags: Set<String> = ["--drops"]
    static let values: Set<String> = ["-w", "--input", "--outbound", "--flow", "--snaplen", "--count", "--duration", "--filter"]

    /// `args` (checked by the caller against `flags` and `values`), the control `socket`;
    /// `value` reads an option's value from the arguments (`Arguments.value`).
    static func run(_ args: [String], socket: String, value: ([String], String) -> String?) -> Never {
        var r = CaptureRequest()
        if let v = value(args, "--input") {
            if v == "socks" || v == "socks5" { Terminal.fail(parseError("capture input=socks"), code: 2) }
            guard let i = CaptureRequest.Input(rawValue: v) else { Terminal.fail("loft capture: --input is tun, bridge or all, got \"\(v)\"", code: 2) }
            r.input = i
        }
        r.outbound = value(args, "--outbound")
        if let v = value(args, "--flow") {
            guard let id = UInt64(v), id > 0 else { Terminal.fail("loft capture: --flow takes an id from `loft status --flows`, got \"\(v)\"", code: 2) }
            r.flow = id
        }
        r.drops = args.contains("--drops")
        if let v = value(args, "--snaplen") {
            guard let n = Int(v), CaptureRequest.snaplenRange.contains(n) else {
                Terminal.fail("loft capture: --snaplen is a number from \(CaptureRequest.snaplenRange.lowerBound) to \(CaptureRequest.snaplenRange.upperBound), got \"\(v)\"", code: 2)
            }
            r.snaplen = n
        }
        if let v = value(args, "--count") {
            guard let n = UInt64(v), n > 0 else { Terminal.fail("loft capture: --count is a positive number, got \"\(v)\"", code: 2) }
            r.count = n
        }
        if let v = value(args, "--duration") {
            guard let ms = milliseconds(v), ms > 0 else { Terminal.fail("loft capture: --duration is a duration (10, 500ms, 10s, 2m, 1h), got \"\(v)\"", code: 2) }
            r.durationMs = ms
        }
        r.filter = value(args, "--filter")
        // The same checks loft makes, before anything is opened.
        if case .failure(let e) = CaptureRequest.parse(r.line) { Terminal.fail("loft \(e.description)", code: 2) }

        let target = value(args, "-w") ?? "-"
        if target == "-" && Syscall.isTerminal(1) {
            Terminal.fail("loft capture: pcapng is not for a terminal: -w FILE, or pipe it (loft capture -w - | tshark -r -)", code: 2)
        }
        let fd: Int32
        switch Syscall.unixConnect(socket) {
        case .success(let c): fd = c
        case .failure(let e): Terminal.fail("loft: cannot reach loft at \(socket): \(e)", code: 1)
        }
        let line = Array((r.line + "\n").utf8)
        guard case .success = line.withUnsafeBytes({ Syscall.write(fd, $0.baseAddress!, $0.count) }) else {
            Terminal.fail("loft: cannot send the capture request to \(socket)", code: 1)
        }
        // The answer's first line: ok, or why not.
        var first: [UInt8] = []
        var byte: UInt8 = 0
        while first.count < 4096, case .success(1) = Syscall.read(fd, &byte, 1), byte != 10 { first.append(byte) }
        let answer = String(decoding: first, as: UTF8.self)
        if answer.hasPrefix("error ") { Terminal.fail("loft: \(answer.dropFirst(6))", code: 1) }
        guard answer == "ok" else { Terminal.fail("loft: no capture from loft at \(socket) (\(answer.prefix(80)))", code: 1) }

        let out: Int32
        if target == "-" {
            out = 1
        } else {
            switch Syscall.createFile(target, mode: 0o644) {
            case .success(let o): out = o
            case .failure(let e): Terminal.fail("loft capture: \(target): \(e)", code: 1)
            }
        }
        // Ctrl-C tells loft (it ends the capture with its statistics), then the rest is read.
        Syscall.halfCloseOnSignals(fd)
        var counter = BlockCounter()
        var buf = [UInt8](repeating: 0, count: 1 << 16)
        var failed: String?
        reading: while true {
            let n: Int
            switch buf.withUnsafeMutableBytes({ Syscall.read(fd, $0.baseAddress!, $0.count) }) {
            case .success(let got) where got > 0: n = got
            case .failure(let e) where e == .interrupted: continue
            case .success: break reading
            case .failure(let e): failed = "reading from loft: \(e)"; break reading
            }
            buf.withUnsafeBytes { counter.feed(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            if case .failure(let e) = buf.withUnsafeBytes({ Syscall.writeAll(out, UnsafeRawBufferPointer(rebasing: $0[0..<n])) }) {
                // The reader of stdout went away (tshark ended): the capture ends here.
                if out == 1 && e == .brokenPipe { Syscall.exit(0) }
                Terminal.fail("loft capture: \(target): \(e)", code: 1)
            }
        }
        if out != 1 { _ = Syscall.close(out) }
        Terminal.note("loft capture: \(counter.packets) packets, \(counter.lost) lost\(counter.sawStatistics ? "" : " (as far as seen: loft sent no statistics)")")
        if let failed { Terminal.fail("loft capture: \(failed)", code: 1) }
        Syscall.exit(0)
    }

    /// "10" (seconds), "500ms", "10s", "2m", "1h" in milliseconds.
    static func milliseconds(_ text: String) -> UInt64? {
        for (unit, ms) in [("ms", UInt64(1)), ("s", 1000), ("m", 60_000), ("h", 3_600_000)] where text.hasSuffix(unit) {
            let number = text.dropLast(unit.count)
            if !number.isEmpty, number.allSatisfy({ $0.isASCII && $0.isNumber }), let n = UInt64(number) { return n.multipliedReportingOverflow(by: ms).overflow ? nil : n * ms }
        }
        return UInt64(text).flatMap { $0.multipliedReportingOverflow(by: 1000).overflow ? nil : $0 * 1000 }
    }

    private static func parseError(_ line: String) -> String {
        if case .failure(let e) = CaptureRequest.parse(line) { return "loft \(e.description)" }
        return "loft capture: \(line)"
    }
}

/// Counts a pcapng stream's packets and, from its Interface Statistics blocks, those lost,
/// as the bytes go by (a block may span reads).
struct BlockCounter {
    private(set) var packets: UInt64 = 0
    private(set) var lost: UInt64 = 0
    private(set) var sawStatistics = false
    private var header: [UInt8] = []
    private var remaining = 0
    private var statistics: [UInt8]?

    mutating func feed(_ bytes: UnsafeRawBufferPointer) {
        var i = 0
        while i < bytes.count {
            if remaining == 0 {
                header.append(bytes[i]); i += 1
                guard header.count == 8 else { continue }
                let type = u32(header, 0), length = Int(u32(header, 4))
                header.removeAll(keepingCapacity: true)
                guard length >= 12 else { return }
                remaining = length - 8
                if type == 6 { packets &+= 1 }
                statistics = type == 5 ? [] : nil
                continue
            }
            let take = min(remaining, bytes.count - i)
            statistics?.append(contentsOf: bytes[i..<(i + take)])
            remaining -= take
            i += take
            if remaining == 0, let s = statistics {
                sawStatistics = true
                lost &+= osdrop(s)
                statistics = nil
            }
        }
    }

    /// isb_osdrop from an Interface Statistics block's body (after type and length).
    private func osdrop(_ b: [UInt8]) -> UInt64 {
        var i = 12
        while i + 4 <= b.count {
            let code = Int(b[i]) | Int(b[i + 1]) << 8, len = Int(b[i + 2]) | Int(b[i + 3]) << 8
            if code == 0 { break }
            if code == 7, len == 8, i + 12 <= b.count {
                return (0..<8).reduce(UInt64(0)) { $0 | UInt64(b[i + 4 + $1]) << (8 * $1) }
            }
            i += 4 + ((len + 3) & ~3)
        }
        return 0
    }

    private func u32(_ b: [UInt8], _ i: Int) -> UInt32 {
        UInt32(b[i]) | UInt32(b[i + 1]) << 8 | UInt32(b[i + 2]) << 16 | UInt32(b[i + 3]) << 24
    }
}
