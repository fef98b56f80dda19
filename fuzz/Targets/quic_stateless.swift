// What the front answers without keeping state, fed arbitrary UDP payloads (docs/front.md,
// "Retry" and "Stateless reset"):
// - cngtcp2_initial_token: an Initial's token, told apart (none, a Retry or NEW_TOKEN token of
//   ours that verifies, a Retry token that does not); random bytes after either magic byte
//   (0xb6 Retry, 0x36 NEW_TOKEN) must never verify;
// - cngtcp2_write_retry: a Retry for an acceptable Initial, never larger than the Initial (no
//   amplification): its size and that it is a long-header Retry are checked;
// - cngtcp2_write_reset: a stateless reset only for a short header of more than 21 bytes, at
//   least 21 bytes, smaller than the packet and at most 43.
import CNgtcp2
import Glibc

private let secret = [UInt8](repeating: 0x5A, count: 32)
private let remote: sockaddr_in = {
    var a = sockaddr_in()
    a.sin_family = sa_family_t(AF_INET)
    a.sin_port = UInt16(4433).bigEndian
    a.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    return a
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    var out = [UInt8](repeating: 0, count: 256)
    var addr = remote
    let alen = UInt32(MemoryLayout<sockaddr_in>.size)
    withUnsafePointer(to: &addr) { a in
        let token = cngtcp2_initial_token(data, size, secret, a, alen, 1_000_000_000)
        precondition(token == CNGTCP2_TOKEN_NONE || token == CNGTCP2_TOKEN_INVALID, "a token verified from random bytes")
        let n = cngtcp2_write_retry(&out, out.count, data, size, secret, a, alen, 1_000_000_000)
        if n > 0 {
            precondition(n < size && out[0] & 0xF0 == 0xF0, "a Retry of \(n) bytes for \(size)")
        }
    }
    let r = cngtcp2_write_reset(&out, out.count, data, size, 18, secret)
    if size <= 21 || data[0] & 0x80 != 0 {
        precondition(r == 0, "a reset for a packet it must not answer")
    } else if r != 0 {
        precondition(r >= 21 && r < size && r <= 43 && out[0] & 0xC0 == 0x40, "a reset of \(r) bytes for \(size)")
    }
    return 0
}
