/// Where something was written: a file, a 1-based line and a 1-based column.
public struct SourcePosition: Sendable, Equatable, Hashable, CustomStringConvertible {
    public var file: String
    public var line: Int
    public var column: Int

    public init(file: String, line: Int, column: Int) {
        self.file = file
        self.line = line
        self.column = column
    }

    /// `file:line:column`
    public var description: String { "\(file):\(line):\(column)" }
}

/// A configuration that cannot be used, with the place that makes it so.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Where the problem is; nil when it concerns the file as a whole (e.g. it cannot be read).
    public var position: SourcePosition?
    public var message: String
    /// The file the error is about; equals `position.file` when there is a position.
    public var file: String

    public init(position: SourcePosition, message: String) {
        self.position = position
        self.message = message
        self.file = position.file
    }

    public init(file: String, message: String) {
        self.position = nil
        self.message = message
        self.file = file
    }

    /// `file:line:column: message`, or `file: message` without a position.
    public var description: String {
        if let position { return "\(position): \(message)" }
        return "\(file): \(message)"
    }
}
