/* cyaml: a thin plain-C view of one YAML document, parsed with libyaml.
 *
 * The document is flattened into an array of nodes in document order (preorder); nodes[0] is the
 * root. Containers link to their children with first_child / next_sibling; a mapping's children
 * alternate key, value, key, value. Aliases are rejected, anchors and tags are ignored (a tagged
 * scalar counts as not plain). Lines and columns are 1-based. */
#ifndef CYAML_H
#define CYAML_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CYAML_NODE_SCALAR 1
#define CYAML_NODE_MAPPING 2
#define CYAML_NODE_SEQUENCE 3

typedef struct cyaml_node {
    int kind;            /* CYAML_NODE_* */
    int plain;           /* scalar: 1 when written plain (unquoted, no tag), else 0 */
    const char *text;    /* scalar: UTF-8 bytes, NUL-terminated (may hold NULs); NULL otherwise */
    size_t length;       /* scalar: byte length of text */
    long line;           /* 1-based */
    long column;         /* 1-based, in characters */
    long first_child;    /* container: index of the first child, -1 when empty */
    long next_sibling;   /* index of the next child of the same parent, -1 when last */
    long child_count;    /* container: number of children (a mapping has 2 per pair) */
} cyaml_node;

typedef struct cyaml_document {
    cyaml_node *nodes;   /* node_count nodes; node_count == 0 for an empty stream */
    long node_count;
    char *error;         /* set when cyaml_parse fails: libyaml's problem text */
    long error_line;     /* 1-based; 0 when unknown */
    long error_column;   /* 1-based; 0 when unknown */
} cyaml_document;

/* Parses data (length bytes, need not be NUL-terminated). Returns 0 on success, -1 on error
 * (doc->error and its position are set). Always call cyaml_free afterwards. */
int cyaml_parse(const char *data, size_t length, cyaml_document *doc);

void cyaml_free(cyaml_document *doc);

#ifdef __cplusplus
}
#endif

#endif
