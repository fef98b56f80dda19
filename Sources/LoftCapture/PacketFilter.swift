import CPcap

/// A tcpdump filter expression compiled by libpcap (on a dead handle: no device is opened) into
/// a BPF program for raw IP packets, run in loft on each packet a capture sees.
final class PacketFilter {
    private let program: OpaquePointer
    let expression: String

    /// The compiled expression, or libpcap's message for why not.
    static func compile(_ expression: String, snaplen: Int) -> Result<PacketFilter, CaptureError> {
        var error = [CChar](repeating: 0, count: 512)
        guard let p = cpcap_compile(expression, Int32(snaplen), &error, error.count) else {
            let why = String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return .failure(CaptureError("filter \"\(expression.prefix(80))\": \(why.isEmpty ? "does not compile" : why)"))
        }
        return .success(PacketFilter(p, expression))
    }

    private init(_ program: OpaquePointer, _ expression: String) {
        self.program = program
        self.expression = expression
    }

    deinit { cpcap_free(program) }

    /// The packet (its first `captured` bytes here, `length` on the wire) matches.
    @inline(__always)
    func matches(_ packet: UnsafeRawBufferPointer, captured: Int, length: Int) -> Bool {
        guard let base = packet.baseAddress else { return false }
        return cpcap_match(program, base.assumingMemoryBound(to: UInt8.self), UInt32(captured), UInt32(length)) != 0
    }

    var instructions: Int { Int(cpcap_instructions(program)) }
}

/// Why a capture could not start (the answer's `error …` line).
public struct CaptureError: Error, CustomStringConvertible, Equatable {
    public var description: String
    public init(_ d: String) { description = d }
}
