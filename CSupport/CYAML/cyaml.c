/* The only file in loft that includes <yaml.h>. */
#include "cyaml.h"

#include <yaml.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deeper nesting than this is refused (the Swift side walks the tree recursively). */
#define CYAML_MAX_DEPTH 128

typedef struct {
    long index;       /* the open container */
    long last_child;  /* its last child so far, -1 when none */
} cyaml_open;

static void cyaml_set_error(cyaml_document *doc, long line, long column, const char *fmt, ...) {
    if (doc->error) return; /* keep the first */
    char buffer[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buffer, sizeof buffer, fmt, ap);
    va_end(ap);
    doc->error = strdup(buffer);
    doc->error_line = line;
    doc->error_column = column;
}

/* Line and column (1-based, column in characters) of a byte offset. */
static void cyaml_position_of_offset(const char *data, size_t length, size_t offset,
                                     long *line, long *column) {
    long l = 1, c = 1;
    if (offset > length) offset = length;
    for (size_t i = 0; i < offset; i++) {
        unsigned char b = (unsigned char)data[i];
        if (b == '\n') { l++; c = 1; }
        else if ((b & 0xC0) != 0x80) c++;
    }
    *line = l;
    *column = c;
}

static void cyaml_parser_error(cyaml_document *doc, const yaml_parser_t *parser,
                               const char *data, size_t length) {
    const char *problem = parser->problem ? parser->problem : "unknown error";
    switch (parser->error) {
    case YAML_MEMORY_ERROR:
        cyaml_set_error(doc, 0, 0, "out of memory while parsing YAML");
        break;
    case YAML_READER_ERROR: {
        long line, column;
        cyaml_position_of_offset(data, length, parser->problem_offset, &line, &column);
        if (parser->problem_value != -1)
            cyaml_set_error(doc, line, column, "invalid YAML: %s (byte 0x%X)", problem, parser->problem_value);
        else
            cyaml_set_error(doc, line, column, "invalid YAML: %s", problem);
        break;
    }
    default:
        if (parser->context)
            cyaml_set_error(doc, (long)parser->problem_mark.line + 1,
                            (long)parser->problem_mark.column + 1, "invalid YAML: %s (%s at line %ld, column %ld)",
                            problem, parser->context, (long)parser->context_mark.line + 1,
                            (long)parser->context_mark.column + 1);
        else
            cyaml_set_error(doc, (long)parser->problem_mark.line + 1,
                            (long)parser->problem_mark.column + 1, "invalid YAML: %s", problem);
        break;
    }
}

/* Appends a node and links it under the innermost open container. Returns its index or -1. */
static long cyaml_add(cyaml_document *doc, long *capacity, cyaml_open *stack, int depth,
                      const cyaml_node *node) {
    if (doc->node_count == *capacity) {
        long wanted = *capacity ? *capacity * 2 : 64;
        cyaml_node *grown = realloc(doc->nodes, (size_t)wanted * sizeof *grown);
        if (!grown) return -1;
        doc->nodes = grown;
        *capacity = wanted;
    }
    long index = doc->node_count++;
    doc->nodes[index] = *node;
    if (depth > 0) {
        cyaml_open *parent = &stack[depth - 1];
        if (parent->last_child < 0) doc->nodes[parent->index].first_child = index;
        else doc->nodes[parent->last_child].next_sibling = index;
        parent->last_child = index;
        doc->nodes[parent->index].child_count++;
    }
    return index;
}

int cyaml_parse(const char *data, size_t length, cyaml_document *doc) {
    memset(doc, 0, sizeof *doc);
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        cyaml_set_error(doc, 0, 0, "out of memory while parsing YAML");
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, length);

    cyaml_open stack[CYAML_MAX_DEPTH];
    int depth = 0;
    long capacity = 0;
    int documents = 0;
    int failed = 0;
    int done = 0;

    while (!done && !failed) {
        yaml_event_t event;
        if (!yaml_parser_parse(&parser, &event)) {
            cyaml_parser_error(doc, &parser, data, length);
            failed = 1;
            break;
        }
        long line = (long)event.start_mark.line + 1;
        long column = (long)event.start_mark.column + 1;
        cyaml_node node;
        memset(&node, 0, sizeof node);
        node.line = line;
        node.column = column;
        node.first_child = -1;
        node.next_sibling = -1;

        switch (event.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++documents > 1) {
                cyaml_set_error(doc, line, column, "only one YAML document is allowed");
                failed = 1;
            }
            break;
        case YAML_ALIAS_EVENT:
            cyaml_set_error(doc, line, column, "YAML aliases (*%s) are not supported",
                            event.data.alias.anchor ? (const char *)event.data.alias.anchor : "");
            failed = 1;
            break;
        case YAML_SCALAR_EVENT: {
            size_t n = event.data.scalar.length;
            char *text = malloc(n + 1);
            if (!text) { cyaml_set_error(doc, 0, 0, "out of memory while parsing YAML"); failed = 1; break; }
            memcpy(text, event.data.scalar.value, n);
            text[n] = 0;
            node.kind = CYAML_NODE_SCALAR;
            node.plain = event.data.scalar.plain_implicit && event.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
            node.text = text;
            node.length = n;
            if (cyaml_add(doc, &capacity, stack, depth, &node) < 0) {
                free(text);
                cyaml_set_error(doc, 0, 0, "out of memory while parsing YAML");
                failed = 1;
            }
            break;
        }
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT: {
            if (depth == CYAML_MAX_DEPTH) {
                cyaml_set_error(doc, line, column, "nesting deeper than %d levels", CYAML_MAX_DEPTH);
                failed = 1;
                break;
            }
            node.kind = event.type == YAML_MAPPING_START_EVENT ? CYAML_NODE_MAPPING : CYAML_NODE_SEQUENCE;
            long index = cyaml_add(doc, &capacity, stack, depth, &node);
            if (index < 0) {
                cyaml_set_error(doc, 0, 0, "out of memory while parsing YAML");
                failed = 1;
                break;
            }
            stack[depth].index = index;
            stack[depth].last_child = -1;
            depth++;
            break;
        }
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            if (depth > 0) depth--;
            break;
        default:
            break;
        }
        yaml_event_delete(&event);
    }
    yaml_parser_delete(&parser);
    return failed ? -1 : 0;
}

void cyaml_free(cyaml_document *doc) {
    if (!doc) return;
    for (long i = 0; i < doc->node_count; i++)
        free((void *)doc->nodes[i].text);
    free(doc->nodes);
    free(doc->error);
    memset(doc, 0, sizeof *doc);
}
