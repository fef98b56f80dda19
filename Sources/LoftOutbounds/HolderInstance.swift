import LoftCarriers
import LoftCore
import LoftIO
import LoftProtocol
import LoftSessionStream

/// The holder's instance across loft's restarts: the state file a RESUME starts from.
extension HolderOutbound {
    // MARK: the instance across restarts

    static let stateHeader = "loft-holder-state 1"

    /// The first dial RESUMEs the instance the state file names, so the front gives back the
    /// same overlay address. A missing or unreadable file means HELLO (said in the log).
    func restoreInstance() {
        guard let path = options.stateFile else { return }
        switch StateFile.read(path, maxBytes: 4096) {
        case .missing:
            return
        case .failed(let why):
            Log.warn("holder.state-unreadable", ["outbound": name, "file": path, "error": why])
        case .bytes(let b):
            if let id = Self.decodeState(b) {
                session.restore(instance: id)
                savedInstance = id  // a RESUME that keeps it need not write the file again
                Log.info("holder.state-restored", ["outbound": name, "instance": id.description])
            } else {
                Log.warn("holder.state-unreadable", ["outbound": name, "file": path,
                                                      "error": "not a \(Self.stateHeader) file with one instance id"])
            }
        }
    }

    /// The instance id of a state file's bytes: the header line, then the id; nil otherwise.
    static func decodeState(_ bytes: [UInt8]) -> InstanceID? {
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n")
        guard lines.count == 2, lines[0] == stateHeader else { return nil }
        return InstanceID(hex: String(lines[1]))
    }


    func saveInstance(_ id: InstanceID) {
        guard let path = options.stateFile, id != savedInstance else { return }
        if let error = StateFile.write("\(Self.stateHeader)\n\(id)\n", to: path) {
            Log.warn("holder.state-not-saved", ["outbound": name, "file": path, "error": error])
            return
        }
        savedInstance = id
    }
}
