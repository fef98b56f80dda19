/// Cuts a TCP segment larger than a link's MTU into segments that fit, the way the kernel's
/// GSO would: the TUN's offload hands over up to 64 KiB at once, and a flow that passes as
/// packets (packet mode, docs/sstp.md) must leave in pieces the link carries. Each piece gets
/// the original IP and TCP headers (options included) with its own length, sequence number,
/// IPv4 id and checksums; FIN and PSH stay on the last piece, CWR on the first.
public enum TCPSegmentation {
    /// Calls `body` with each piece of `packet` (an IPv4 or IPv6 TCP segment whose transport
    /// header starts at `transportOffset`), each at most `maxPacket` bytes. False (and no call)
    /// when the packet is not one to cut: not TCP, headers too large for `maxPacket`, or it
    /// already fits.
    @discardableResult
    public static func split(_ packet: UnsafeRawBufferPointer, transportOffset t: Int, maxPacket: Int,
                             scratch: UnsafeMutableRawBufferPointer,
                             _ body: (UnsafeRawBufferPointer) -> Void) -> Bool {
        guard packet.count > maxPacket, packet.count >= 20 else { return false }
        let v4 = packet[0] >> 4 == 4
        guard t >= (v4 ? 20 : 40), packet.count >= t + 20 else { return false }
        let h = t + Int(packet[t + 12] >> 4) * 4
        guard h >= t + 20, h <= packet.count, maxPacket > h, scratch.count >= maxPacket else { return false }
        let step = maxPacket - h
        let seq0 = UInt32(packet[t + 4]) << 24 | UInt32(packet[t + 5]) << 16 | UInt32(packet[t + 6]) << 8 | UInt32(packet[t + 7])
        let flags = packet[t + 13]
        let (source, destination) = addresses(of: packet)
        cut(packet, headerLength: h, pieceSize: step, scratch: scratch, { out, offset, last in
            let seq = seq0 &+ UInt32(offset)
            out[t + 4] = UInt8(seq >> 24); out[t + 5] = UInt8(seq >> 16 & 0xFF)
            out[t + 6] = UInt8(seq >> 8 & 0xFF); out[t + 7] = UInt8(seq & 0xFF)
            var f = flags
            if !last { f &= ~(PacketSummary.tcpFIN | 0x08) }   // FIN and PSH: the last piece only
            if offset > 0 { f &= ~0x80 }                        // CWR: the first piece only
            out[t + 13] = f
            put16(out, t + 16, 0)
            put16(out, t + 16, InternetChecksum.transport(source: source, destination: destination, proto: IPProtocol.tcp,
                                                          segment: UnsafeRawBufferPointer(rebasing: out[t...])))
        }, body)
        return true
    }

}

/// Fragments an IPv4 datagram larger than a link's MTU (RFC 791 3.2): each fragment gets the
/// original header (options included) with its own total length, fragment offset, MF flag and
/// header checksum; the payload is cut at multiples of 8 bytes. A fragment is cut again with
/// its offset kept. Used where a packet link carries less than the TUN's MTU (sstp with a server
/// MRU below IPv6's minimum of 1280, which the TUN keeps).
public enum IPv4Fragmentation {
    /// Calls `body` with each fragment of `packet`, each at most `maxPacket` bytes. False (and
    /// no call) when it fits already, is not IPv4, has DF set, or the header leaves no room.
    @discardableResult
    public static func split(_ packet: UnsafeRawBufferPointer, maxPacket: Int, scratch: UnsafeMutableRawBufferPointer,
                             _ body: (UnsafeRawBufferPointer) -> Void) -> Bool {
        guard packet.count > maxPacket, packet.count >= 20, packet[0] >> 4 == 4, packet[6] & 0x40 == 0 else { return false }
        let h = Int(packet[0] & 0x0F) * 4
        let step = (min(maxPacket, scratch.count) - h) & ~7
        guard h >= 20, h < packet.count, step >= 8 else { return false }
        let field = Int(packet[6]) << 8 | Int(packet[7])
        let base = field & 0x1FFF
        let moreAfter = field & 0x2000 != 0
        var at = h
        while at < packet.count {
            let n = min(step, packet.count - at)
            let last = at + n == packet.count
            let out = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<(h + n)])
            out.copyMemory(from: UnsafeRawBufferPointer(rebasing: packet[0..<h]))
            UnsafeMutableRawBufferPointer(rebasing: out[h...]).copyMemory(from: UnsafeRawBufferPointer(rebasing: packet[at..<(at + n)]))
            let total = h + n
            out[2] = UInt8(total >> 8); out[3] = UInt8(total & 0xFF)
            let f = (base + (at - h) / 8) | (last && !moreAfter ? 0 : 0x2000)
            out[6] = UInt8(f >> 8); out[7] = UInt8(f & 0xFF)
            out[10] = 0; out[11] = 0
            let sum = InternetChecksum.of(UnsafeRawBufferPointer(rebasing: out[0..<h]))
            out[10] = UInt8(sum >> 8); out[11] = UInt8(sum & 0xFF)
            body(UnsafeRawBufferPointer(out))
            at += n
        }
        return true
    }
}

/// Cuts a UDP super-datagram (the TUN's UDP segmentation offload: one UDP header over several
/// datagrams' payloads back to back, each `segmentSize` bytes, the last possibly shorter) into
/// the datagrams the app sent, the way the kernel's GSO would: each gets the original IP header
/// with its own length, IPv4 id and header checksum, and a UDP header with its own length and
/// a full checksum (the offload's is only partial).
public enum UDPSegmentation {
    /// Calls `body` with each datagram of `packet` (IPv4 or IPv6 UDP, the UDP header at
    /// `transportOffset`). False (and no call) when it is not one to cut: not UDP, no payload,
    /// a segment size of 0, or a piece larger than `scratch`.
    @discardableResult
    public static func split(_ packet: UnsafeRawBufferPointer, transportOffset t: Int, segmentSize: Int,
                             scratch: UnsafeMutableRawBufferPointer,
                             _ body: (UnsafeRawBufferPointer) -> Void) -> Bool {
        guard packet.count >= 28, segmentSize > 0 else { return false }
        let v4 = packet[0] >> 4 == 4
        guard v4 || packet[0] >> 4 == 6, t >= (v4 ? 20 : 40), (v4 ? packet[9] : packet[6]) == IPProtocol.udp else { return false }
        let h = t + 8
        guard h < packet.count, h + min(segmentSize, packet.count - h) <= scratch.count else { return false }
        let (source, destination) = addresses(of: packet)
        cut(packet, headerLength: h, pieceSize: segmentSize, scratch: scratch, { out, _, _ in
            put16(out, t + 4, UInt16(out.count - t))
            put16(out, t + 6, 0)
            let sum = InternetChecksum.transport(source: source, destination: destination, proto: IPProtocol.udp,
                                                 segment: UnsafeRawBufferPointer(rebasing: out[t...]))
            // 0 means "no checksum" in UDP: an all-ones sum is sent as 0xFFFF.
            put16(out, t + 6, sum == 0 ? 0xFFFF : sum)
        }, body)
        return true
    }

}

// MARK: shared by both

private func put16(_ b: UnsafeMutableRawBufferPointer, _ i: Int, _ v: UInt16) {
    b[i] = UInt8(v >> 8)
    b[i + 1] = UInt8(v & 0xFF)
}

/// The source and destination of an IPv4 or IPv6 packet.
private func addresses(of packet: UnsafeRawBufferPointer) -> (IPAddress, IPAddress) {
    packet[0] >> 4 == 4
        ? (IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: packet[12..<16])),
           IPAddress(ipv4Bytes: UnsafeRawBufferPointer(rebasing: packet[16..<20])))
        : (IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: packet[8..<24])),
           IPAddress(ipv6Bytes: UnsafeRawBufferPointer(rebasing: packet[24..<40])))
}

/// Builds each piece of `packet` in `scratch`: its first `h` bytes (the IP and transport
/// headers), then the next at most `pieceSize` payload bytes; the IP header gets the piece's
/// length and, for IPv4, the next id and its checksum; `transport(piece, payload offset, last)`
/// fixes the transport header; then `body` has the piece.
private func cut(_ packet: UnsafeRawBufferPointer, headerLength h: Int, pieceSize: Int,
                 scratch: UnsafeMutableRawBufferPointer,
                 _ transport: (UnsafeMutableRawBufferPointer, Int, Bool) -> Void,
                 _ body: (UnsafeRawBufferPointer) -> Void) {
    let v4 = packet[0] >> 4 == 4
    let ipHeader = v4 ? Int(packet[0] & 0x0F) * 4 : 40
    let id0 = v4 ? UInt16(packet[4]) << 8 | UInt16(packet[5]) : 0
    let payload = packet.count - h
    var offset = 0
    var index: UInt16 = 0
    while offset < payload {
        let n = min(pieceSize, payload - offset)
        let out = UnsafeMutableRawBufferPointer(rebasing: scratch[0 ..< h + n])
        out.copyMemory(from: UnsafeRawBufferPointer(rebasing: packet[0..<h]))
        UnsafeMutableRawBufferPointer(rebasing: out[h...]).copyMemory(from: UnsafeRawBufferPointer(rebasing: packet[h + offset ..< h + offset + n]))
        if v4 {
            put16(out, 2, UInt16(out.count))
            put16(out, 4, id0 &+ index)
            put16(out, 10, 0)
            put16(out, 10, InternetChecksum.of(UnsafeRawBufferPointer(rebasing: out[0..<ipHeader])))
        } else {
            put16(out, 4, UInt16(out.count - 40))
        }
        transport(out, offset, offset + n == payload)
        body(UnsafeRawBufferPointer(out))
        offset += n
        index &+= 1
    }
}
