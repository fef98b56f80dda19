import CYAML

/// One node of a parsed YAML document, with the position where it starts.
public struct YAMLNode: Sendable, Equatable {
    public enum Value: Sendable, Equatable {
        /// A scalar's text; `plain` when it was written without quotes or tag.
        case scalar(String, plain: Bool)
        /// Key-value pairs in document order (duplicates are kept; the loader rejects them).
        case mapping([YAMLPair])
        case sequence([YAMLNode])
    }

    public var value: Value
    public var position: SourcePosition

    public init(_ value: Value, at position: SourcePosition) {
        self.value = value
        self.position = position
    }

    /// The text of a scalar, nil for containers.
    public var scalar: String? {
        if case .scalar(let text, _) = value { return text }
        return nil
    }

    /// Whether this is a plain scalar meaning "no value": empty, `~` or `null`.
    public var isNull: Bool {
        if case .scalar(let text, plain: true) = value {
            return text.isEmpty || text == "~" || text == "null" || text == "Null" || text == "NULL"
        }
        return false
    }
}

public struct YAMLPair: Sendable, Equatable {
    public var key: YAMLNode
    public var value: YAMLNode

    public init(key: YAMLNode, value: YAMLNode) {
        self.key = key
        self.value = value
    }
}

public enum YAML {
    /// Parses one YAML document. Returns nil for an empty stream (nothing, or only comments).
    /// Syntax errors carry libyaml's line, column and problem text.
    public static func parse(_ text: String, file: String) throws(ConfigError) -> YAMLNode? {
        try parse(bytes: Array(text.utf8), file: file)
    }

    /// Parses raw bytes, so that invalid UTF-8 is reported by libyaml with its position.
    public static func parse(bytes: [UInt8], file: String) throws(ConfigError) -> YAMLNode? {
        var document = cyaml_document()
        defer { cyaml_free(&document) }
        let rc = bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                cyaml_parse(chars.baseAddress, chars.count, &document)
            }
        }
        if rc != 0 {
            let message = document.error.map { String(cString: $0) } ?? "YAML syntax error"
            if document.error_line > 0 {
                throw ConfigError(
                    position: SourcePosition(file: file, line: document.error_line,
                                             column: max(1, document.error_column)),
                    message: message)
            }
            throw ConfigError(file: file, message: message)
        }
        guard document.node_count > 0, let nodes = document.nodes else { return nil }
        let flat = UnsafeBufferPointer(start: nodes, count: document.node_count)
        return build(flat, 0, file: file)
    }

    private static func build(_ nodes: UnsafeBufferPointer<cyaml_node>, _ index: Int,
                              file: String) -> YAMLNode {
        let node = nodes[index]
        let position = SourcePosition(file: file, line: node.line, column: node.column)
        switch node.kind {
        case CYAML_NODE_SCALAR:
            var text = ""
            if let p = node.text {
                text = p.withMemoryRebound(to: UInt8.self, capacity: node.length) {
                    String(decoding: UnsafeBufferPointer(start: $0, count: node.length), as: UTF8.self)
                }
            }
            return YAMLNode(.scalar(text, plain: node.plain != 0), at: position)
        default:
            var children: [YAMLNode] = []
            children.reserveCapacity(node.child_count)
            var child = node.first_child
            while child >= 0 {
                children.append(build(nodes, child, file: file))
                child = nodes[child].next_sibling
            }
            if node.kind == CYAML_NODE_MAPPING {
                var pairs: [YAMLPair] = []
                pairs.reserveCapacity(children.count / 2)
                var i = 0
                while i + 1 < children.count {
                    pairs.append(YAMLPair(key: children[i], value: children[i + 1]))
                    i += 2
                }
                return YAMLNode(.mapping(pairs), at: position)
            }
            return YAMLNode(.sequence(children), at: position)
        }
    }
}
