/// Counters of one front since it started. Gauges (sessions attached now, streams open now)
/// are filled in when a report is made.
public struct FrontStats: Sendable, Equatable {
    public var carriersAccepted: UInt64 = 0
    /// Carriers closed at once because the front had too many.
    public var carriersRefused: UInt64 = 0
    public var sessionsOpened: UInt64 = 0           // HELLO accepted: a new instance
    public var sessionsResumed: UInt64 = 0          // RESUME accepted
    public var sessionsSuperseded: UInt64 = 0       // an older carrier of a resumed instance
    public var refusedBadToken: UInt64 = 0
    public var refusedUnknownInstance: UInt64 = 0
    public var refusedOverloaded: UInt64 = 0
    public var refusedNoHello: UInt64 = 0           // no HELLO or RESUME within the deadline
    public var protocolErrors: UInt64 = 0
    public var deadCarriers: UInt64 = 0             // keepalive missed
    public var carriersLost: UInt64 = 0             // ended by the client or the network
    public var instancesExpired: UInt64 = 0
    public var streamsOpened: UInt64 = 0            // TCP OPEN accepted (connected)
    public var streamsFailed: UInt64 = 0            // TCP OPEN refused (dial failed or not allowed)
    public var streamsReset: UInt64 = 0             // reset by either side or lost with the carrier
    public var openTimeouts: UInt64 = 0             // quic flow streams reset: no whole OPEN within connect-timeout
    public var memoryTrims: UInt64 = 0              // freed memory given back after a burst of ended streams
    public var associationsOpened: UInt64 = 0       // UDP OPEN accepted
    public var associationsTimedOut: UInt64 = 0     // closed after udp-idle-timeout without datagrams
    public var bytesUp: UInt64 = 0                  // client → destinations (TCP payload)
    public var bytesDown: UInt64 = 0                // destinations → client
    public var datagramsUp: UInt64 = 0
    public var datagramsDown: UInt64 = 0
    public var datagramsDropped: UInt64 = 0         // session output full, or not sendable
    public var handshakesFailed: UInt64 = 0         // TLS or request head not done (failure, deadline, HTTP/2 error)
    public var handshakesEvicted: UInt64 = 0        // closed in the handshake to make room for a newer one
    /// From the listener: requests refused with an HTTP status before a carrier existed (404,
    /// 405, 400, 403, 409, 429, 431 ...), every carrier.
    public var requestsRejected: UInt64 = 0
    /// quic: packets for no connection that were not an acceptable Initial (garbage, short
    /// headers for unknown ids, other versions).
    public var quicPacketsDropped: UInt64 = 0
    /// quic: Retry packets sent, Initials let in with a Retry or NEW_TOKEN token that verified, Initials
    /// dropped for one that did not, stateless resets sent.
    public var quicRetries: UInt64 = 0
    public var quicTokensValidated: UInt64 = 0
    public var quicTokensInvalid: UInt64 = 0
    public var quicResets: UInt64 = 0
    /// quic: packets not sent to an address not yet validated, past 3x the bytes it sent
    /// (RFC 9000 §8.1's anti-amplification limit), counted as each connection ends.
    public var quicAmplificationHeld: UInt64 = 0
    /// Replay (docs/protocol.md §8.1): sessions parked at a lost carrier, resumed with their
    /// streams, parked ones ended (grace over, budget), their streams that ended so, and the
    /// session bytes sent again after a RESUME.
    public var sessionsParked: UInt64 = 0
    public var sessionsResumedWithStreams: UInt64 = 0
    public var parkedExpired: UInt64 = 0
    public var parkedEvicted: UInt64 = 0
    public var streamsLost: UInt64 = 0
    public var replayedBytes: UInt64 = 0
    /// Multipath TCP (`mptcp: true` on the listener): carriers whose TCP connections run MPTCP
    /// (ws, h2: the one; get: both), and connections accepted that run it or came as plain TCP.
    public var carriersMptcp: UInt64 = 0
    public var mptcpAccepted: UInt64 = 0
    public var mptcpFallbacks: UInt64 = 0

    // Gauges.
    public var sessionsAttached = 0
    public var instancesDetached = 0
    public var carriersOpen = 0
    public var streamsOpen = 0
    public var associationsOpen = 0
    /// Replay: sessions parked now, and the bytes every session keeps for replay now.
    public var sessionsParkedNow = 0
    public var replayHeldBytes = 0

    public init() {}

    /// Name and value pairs in a fixed order, for the log line and the control socket.
    public var fields: [(String, Any)] {
        [("sessions_attached", sessionsAttached), ("instances_detached", instancesDetached),
         ("carriers_open", carriersOpen), ("streams_open", streamsOpen), ("associations_open", associationsOpen),
         ("carriers_accepted", carriersAccepted), ("carriers_refused", carriersRefused),
         ("sessions_opened", sessionsOpened), ("sessions_resumed", sessionsResumed),
         ("sessions_superseded", sessionsSuperseded), ("refused_bad_token", refusedBadToken),
         ("refused_unknown_instance", refusedUnknownInstance), ("refused_overloaded", refusedOverloaded),
         ("refused_no_hello", refusedNoHello), ("protocol_errors", protocolErrors), ("dead_carriers", deadCarriers),
         ("carriers_lost", carriersLost), ("instances_expired", instancesExpired),
         ("streams_opened", streamsOpened), ("streams_failed", streamsFailed), ("streams_reset", streamsReset),
         ("open_timeouts", openTimeouts), ("memory_trims", memoryTrims),
         ("associations_opened", associationsOpened),
         ("associations_timed_out", associationsTimedOut), ("bytes_up", bytesUp), ("bytes_down", bytesDown),
         ("datagrams_up", datagramsUp), ("datagrams_down", datagramsDown), ("datagrams_dropped", datagramsDropped),
         ("handshakes_failed", handshakesFailed), ("handshakes_evicted", handshakesEvicted),
         ("requests_rejected", requestsRejected), ("quic_packets_dropped", quicPacketsDropped),
         ("quic_retries", quicRetries), ("quic_tokens_validated", quicTokensValidated),
         ("quic_tokens_invalid", quicTokensInvalid), ("quic_resets", quicResets),
         ("quic_amplification_held", quicAmplificationHeld),
         ("carriers_mptcp", carriersMptcp), ("mptcp_accepted", mptcpAccepted), ("mptcp_fallbacks", mptcpFallbacks)]
        + [("sessions_parked_now", sessionsParkedNow), ("replay_held_bytes", replayHeldBytes),
           ("sessions_parked", sessionsParked), ("sessions_resumed_with_streams", sessionsResumedWithStreams),
           ("parked_expired", parkedExpired), ("parked_evicted", parkedEvicted), ("streams_lost", streamsLost),
           ("replayed_bytes", replayedBytes)]
    }

    /// `name value` lines.
    public var text: String {
        fields.map { "\($0.0) \($0.1)\n" }.joined()
    }
}
