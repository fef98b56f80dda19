import LoftCarriers
import LoftCore
import LoftIO
import LoftProtocol

/// Replay on the front (docs/protocol.md §8.1): the table of parked sessions, handing a
/// continuing RESUME's carrier to the parked session, and the budget of what parked sessions hold.
extension FrontServer {
    /// The parked session of `id` for a continuing RESUME read on `newConnection`. A session
    /// of the instance still attached to an older carrier (the front has not seen that carrier
    /// die yet) is parked now: the client has already left it.
    func parkedConnection(_ id: InstanceID, for newConnection: FrontConnection) -> FrontConnection? {
        if let old = attachments(id), old !== newConnection, old.parkNow() {
            stats.sessionsSuperseded += 1
        }
        return parked[id]
    }

    /// The carrier of `connection` was lost and its session parked: the instance is detached
    /// (its expiry runs), the streams wait for `resume-grace`.
    func connectionParked(_ connection: FrontConnection) {
        guard let id = connection.instanceID else { return }
        stats.sessionsParked += 1
        parked[id]?.endParked("parked again")   // cannot happen: one session per instance
        connectionEnded(connection)
        parked[id] = connection
        enforceResumeBudget()
    }

    /// A continuing RESUME took over the parked session: attached again.
    func parkedResumed(_ connection: FrontConnection, replayed: UInt64) -> Bool {
        guard let id = connection.instanceID, parked[id] === connection, pool.attach(id) != nil else { return false }
        parked.removeValue(forKey: id)
        registerAttached(connection, id)
        stats.sessionsResumed += 1
        stats.sessionsResumedWithStreams += 1
        stats.replayedBytes &+= replayed
        stateChanged()
        return true
    }

    /// The carrier that read a RESUME handed it to a parked session: forgotten without closing.
    func handedOver(_ connection: FrontConnection) {
        forgetConnection(connection)
    }

    /// A RESUME that does not continue (the client lost its streams, or has no replay): any
    /// parked session of the instance ends.
    func dropParked(_ id: InstanceID) {
        parked[id]?.endParked("RESUME without its streams")
    }

    /// Past `resume-budget` bytes held by parked sessions, the longest parked ones end.
    private func enforceResumeBudget() {
        var total = parked.values.reduce(0) { $0 + $1.parkedBytes }
        while total > settings.resumeBudget, let oldest = parked.values.min(by: { ($0.parkedAt ?? 0) < ($1.parkedAt ?? 0) }) {
            total -= oldest.parkedBytes
            stats.parkedEvicted += 1
            oldest.endParked("resume-budget of \(settings.resumeBudget) bytes reached")
        }
    }
}
