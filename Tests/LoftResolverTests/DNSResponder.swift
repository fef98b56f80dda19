import Glibc
import LoftCore
import LoftIO

/// A small DNS server on 127.0.0.1 for the resolver tests, on the test's loop: answers A and
/// AAAA questions from `records` with the TTL given, NXDOMAIN for names it does not know,
/// and counts every question it gets. `silent` drops every query (`silentNames`, those for
/// some names); names in `malformed` get an
/// answer whose record claims more bytes than the packet has.
final class DNSResponder: IOHandler {
    struct Records {
        var v4: [String] = []
        var v6: [String] = []
        var ttl: UInt32 = 60
    }

    let loop: EventLoop
    let fd: Int32
    let port: UInt16
    var records: [String: Records] = [:]
    var silent = false
    /// Names never answered.
    var silentNames: Set<String> = []
    var malformed: Set<String> = []
    /// Questions received, by "name A" / "name AAAA" (names lower-cased, no trailing dot).
    private(set) var questions: [String: Int] = [:]
    var totalQuestions: Int { questions.values.reduce(0, +) }

    /// Listens on `address` (IPv4), at `port` (0: any).
    init(loop: EventLoop, address: IPAddress = IPAddress("127.0.0.1")!, port wanted: UInt16 = 0) throws {
        self.loop = loop
        let s = Sockets.make(family: AF_INET, type: Int32(SOCK_DGRAM.rawValue))
        guard s >= 0 else { throw SystemError("socket", Sockets.errno) }
        let address = SocketAddress(Endpoint(address, wanted))
        guard address.withSockaddr({ bind(s, $0, $1) }) == 0, let local = Sockets.localEndpoint(s) else {
            close(s)
            throw SystemError("bind", Sockets.errno)
        }
        fd = s
        port = local.port
        loop.register(fd, IOEvents.readable, self)
    }

    deinit {
        loop.unregister(fd)
        close(fd)
    }

    var server: String { "127.0.0.1:\(port)" }

    func count(_ name: String, _ type: String) -> Int { questions["\(name) \(type)"] ?? 0 }

    func handleIO(_ events: UInt32) {
        var buffer = [UInt8](repeating: 0, count: 1500)
        while true {
            var from = SocketAddress()
            let n = buffer.withUnsafeMutableBytes { b in
                from.withMutableSockaddr { recvfrom(fd, b.baseAddress, b.count, Int32(MSG_DONTWAIT), $0, $1) }
            }
            guard n > 0 else { return }
            guard let reply = answer(Array(buffer[0..<n])) else { continue }
            _ = reply.withUnsafeBytes { r in from.withSockaddr { sendto(fd, r.baseAddress, r.count, 0, $0, $1) } }
        }
    }

    /// The reply to one query, or nil to stay silent (or for a query it cannot read).
    private func answer(_ q: [UInt8]) -> [UInt8]? {
        guard q.count >= 12, q[4] == 0, q[5] == 1 else { return nil }
        var i = 12
        var labels: [String] = []
        while true {
            guard i < q.count else { return nil }
            let length = Int(q[i])
            i += 1
            if length == 0 { break }
            guard length < 64, i + length <= q.count else { return nil }
            labels.append(String(decoding: q[i..<i + length], as: UTF8.self).lowercased())
            i += length
        }
        guard i + 4 <= q.count else { return nil }
        let type = UInt16(q[i]) << 8 | UInt16(q[i + 1])
        let questionEnd = i + 4
        let name = labels.joined(separator: ".")
        let typeName = type == 1 ? "A" : type == 28 ? "AAAA" : "TYPE\(type)"
        questions["\(name) \(typeName)", default: 0] += 1
        if silent || silentNames.contains(name) { return nil }

        var rdata: [[UInt8]] = []
        var ttl: UInt32 = 0
        var rcode: UInt8 = 3
        if let r = records[name] {
            rcode = 0
            ttl = r.ttl
            let texts = type == 1 ? r.v4 : type == 28 ? r.v6 : []
            for t in texts {
                var bytes = [UInt8](repeating: 0, count: 16)
                let n = bytes.withUnsafeMutableBytes { IPAddress(t)!.write(to: $0.baseAddress!) }
                rdata.append(Array(bytes[0..<n]))
            }
        }
        // Header: the query's ID, QR + the query's RD, RA + rcode, one question, the answers.
        var out: [UInt8] = [q[0], q[1], 0x80 | (q[2] & 0x01), 0x80 | rcode, 0, 1]
        out += [UInt8(rdata.count >> 8), UInt8(rdata.count & 0xFF), 0, 0, 0, 0]
        out += q[12..<questionEnd]
        for d in rdata {
            // The name as a pointer to the question's, then type, class IN, TTL, length, data.
            out += [0xC0, 0x0C, UInt8(type >> 8), UInt8(type & 0xFF), 0, 1]
            out += [UInt8(ttl >> 24), UInt8(ttl >> 16 & 0xFF), UInt8(ttl >> 8 & 0xFF), UInt8(ttl & 0xFF)]
            if malformed.contains(name) {
                out += [0x00, 0xFF]  // claims 255 bytes; the packet ends after the address
            } else {
                out += [0, UInt8(d.count)]
            }
            out += d
        }
        return out
    }
}
