import CNgtcp2
import Glibc
import LoftCore
import LoftIO

/// A QUIC connection id (at most 20 bytes) as a dictionary key.
package struct QuicCID: Hashable {
    package var a: UInt64 = 0, b: UInt64 = 0, c: UInt32 = 0
    package var count: UInt8 = 0

    package init?(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count <= 20 else { return nil }
        count = UInt8(bytes.count)
        let n = bytes.count
        withUnsafeMutableBytes(of: &a) { d in d.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[0..<min(8, n)])) }
        if n > 8 { withUnsafeMutableBytes(of: &b) { d in d.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[8..<min(16, n)])) } }
        if n > 16 { withUnsafeMutableBytes(of: &c) { d in d.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[16..<n])) } }
    }
}

/// Limits of one QUIC connection (both ends use the same).
package struct QuicLimits {
    package init() {}

    package var maxData: UInt64 = 4 << 20
    package var maxStreamData: UInt64 = 2 << 20
    package var maxWindow: UInt64 = 24 << 20
    package var maxStreamWindow: UInt64 = 16 << 20
    package var maxStreamsBidi: UInt64 = 1024
    package var idleTimeoutMs: UInt64 = 30_000
    package var handshakeTimeoutMs: UInt64 = 10_000
    package var maxDatagramFrame: UInt64 = 65_535
    /// Unidirectional streams the peer may open and their window (h3's control and QPACK
    /// streams; the quic carrier uses none).
    package var maxStreamsUni: UInt64 = 0
    package var maxStreamDataUni: UInt64 = 0
    /// Send buffer per stream (bytes written and not yet acknowledged).
    package var sendBuffer: Int = 4 << 20
    /// Send buffer of a flow's stream (every stream but the session's; the quic carrier opens
    /// its flows with it).
    package static let flowSendBuffer = 4 << 20
    /// All streams but the session stream together: bytes written and not yet acknowledged.
    /// A peer that opens flows and never reads them (never extends their windows) holds at
    /// most this much of the connection's memory, not 1 MiB per flow.
    package var sendBudget: Int = 16 << 20
    /// The largest UDP payload sent and announced (0: 1452, found by path MTU discovery from
    /// 1200 up). Above 1452 every packet may be this large from the start: only for a path
    /// known to carry it (docs/holder.md, "Packet size").
    package var maxPacket: Int = 0
    /// `maxPacket` is above what path MTU discovery reaches: packets that size go unprobed.
    package var packetAboveDiscovery: Bool { maxPacket > Int(CNGTCP2_DEFAULT_MAX_PACKET) }

    package var params: cngtcp2_params {
        cngtcp2_params(max_data: maxData, max_stream_data: maxStreamData, max_window: maxWindow,
                     max_stream_window: maxStreamWindow, max_streams_bidi: maxStreamsBidi,
                     idle_timeout_ms: idleTimeoutMs, handshake_timeout_ms: handshakeTimeoutMs,
                     max_datagram_frame_size: maxDatagramFrame, token: nil, token_len: 0,
                     max_streams_uni: maxStreamsUni, max_stream_data_uni: maxStreamDataUni,
                     max_packet: UInt64(maxPacket))
    }
}

/// A NUL-terminated C string held in an array.
package func cText(_ a: [CChar]) -> String {
    a.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

