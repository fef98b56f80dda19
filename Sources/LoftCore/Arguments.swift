/// The executables' argument reading, shared by `loft` and `loft-front`: a command's arguments
/// are `-c FILE` (or, where `positional`, a bare FILE), the flags it knows and the options
/// that take a value; anything else is a usage error (the message and exit 2).
public struct Arguments: Sendable {
    /// The program's name, as error lines start with it.
    public let program: String
    /// Printed after an unknown argument.
    public let usage: String

    public init(program: String, usage: String) {
        self.program = program
        self.usage = usage
    }

    /// `--help`, `-h`, `help`: the usage; `--version`, `-V`, `version`: the program and its
    /// release. True when `command` was one of them (the caller exits 0).
    public func answered(_ command: String) -> Bool {
        switch command {
        case "--help", "-h", "help": Terminal.say(usage)
        case "--version", "-V", "version": Terminal.say("\(program) \(Release.description)")
        default: return false
        }
        return true
    }

    /// The configuration at `path` as `loader` reads it; its error on stderr and exit 2 when it
    /// does not load.
    public func load<T, E: Error & CustomStringConvertible>(_ path: String, with loader: (String) throws(E) -> T) -> T {
        do {
            return try loader(path)
        } catch {
            Terminal.fail(error.description, code: 2)
        }
    }

    /// The value after option `name`, if it has one.
    public func value(_ args: [String], _ name: String) -> String? {
        guard let i = args.firstIndex(of: name), i + 1 < args.count else { return nil }
        return args[i + 1]
    }

    /// The configuration file the arguments name, or nil; exits 2 on anything it does not know.
    public func configPath(_ args: [String], positional: Bool = false, flags: Set<String> = [],
                           values: Set<String> = []) -> String? {
        var path: String?
        var i = 0
        while i < args.count {
            switch args[i] {
            case "-c", "--config":
                guard i + 1 < args.count else { Terminal.fail("\(program): -c needs a file", code: 2) }
                path = args[i + 1]
                i += 2
            case let f where flags.contains(f):
                i += 1
            case let v where values.contains(v):
                guard i + 1 < args.count else { Terminal.fail("\(program): \(v) needs a value", code: 2) }
                i += 2
            case let file where positional && path == nil && !file.hasPrefix("-"):
                path = file
                i += 1
            default:
                Terminal.fail("\(program): unknown argument \"\(args[i])\"\n\(usage)", code: 2)
            }
        }
        return path
    }
}
