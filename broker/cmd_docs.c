/*
 * broker/cmd_docs.c — COMMAND DOCS: Redis 7's documentation reply, built from
 * the command table's own syntax and summary columns, so interactive
 * redis-cli shows argument hints while typing, `help SEND` and Tab
 * completion work, and nothing is written twice.
 *
 * Each command is a map {summary, since, group, arguments}. The arguments
 * are the syntax column parsed into Redis's argument tree (docs/protocol.md,
 * COMMAND): a lower-case word is a value (type "string"), an upper-case word
 * a token ("pure-token"), and an upper-case word followed by one value is
 * that value with the token in front; `[ … ]` is optional, `x ...` or `x...`
 * repeats, `a|b` (no blanks) and `a | b` (with blanks, whole sequences) are
 * one-of, a sequence of several arguments inside one is a "block". The
 * strings are bulk strings and the flags simple strings, as redis-cli reads
 * them.
 *
 * Loop thread only (pure formatting).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "broker/cmd_shared.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

#define DOCS_SINCE     PACKAGE_VERSION
#define DOCS_MAX_NODES 64

/* One node of the argument tree. */
typedef struct arg_node {
    enum {
        ARG_VALUE,
        ARG_TOKEN,
        ARG_ONEOF,
        ARG_BLOCK
    } kind;
    char word[48];  /* VALUE: its name; TOKEN: the token */
    char token[48]; /* VALUE: a token before it ("" when none) */
    int optional, multiple;
    int child[16], nchild;
} arg_node_t;

typedef struct parser {
    const char *p;
    arg_node_t nodes[DOCS_MAX_NODES];
    int n;
} parser_t;

static int node_new(parser_t *ps, int kind)
{
    if (ps->n == DOCS_MAX_NODES) {
        return -1;
    }
    arg_node_t *a = &ps->nodes[ps->n];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    return ps->n++;
}

static void skip_blanks(parser_t *ps)
{
    while (*ps->p == ' ') {
        ps->p++;
    }
}

static int is_upper_word(const char *w)
{
    int letters = 0;
    for (; *w; w++) {
        if (islower((unsigned char)*w)) {
            return 0;
        }
        letters += isupper((unsigned char)*w) != 0;
    }
    return letters > 0;
}

/* Append child to parent's children; either may be -1 (node_new found the
 * table full): then nothing happens and the docs come out shorter. */
static void add_child(parser_t *ps, int parent, int child)
{
    if (parent < 0 || child < 0) {
        return;
    }
    arg_node_t *a = &ps->nodes[parent];
    if (a->nchild < (int)(sizeof a->child / sizeof a->child[0])) {
        a->child[a->nchild++] = child;
    }
}

static int parse_seq(parser_t *ps, char end);

/* One item: a word (with its tight a|b alternatives and a trailing "...") or
 * a [bracketed] sequence. -1 at the end of the sequence. */
static int parse_item(parser_t *ps)
{
    skip_blanks(ps);
    if (*ps->p == '[') {
        ps->p++;
        int seq = parse_seq(ps, ']');
        if (*ps->p == ']') {
            ps->p++;
        }
        if (seq >= 0) {
            ps->nodes[seq].optional = 1;
        }
        return seq;
    }
    int alt = -1, first = -1;
    for (;;) {
        char w[48];
        size_t n = 0;
        while (*ps->p && *ps->p != ' ' && *ps->p != '|' && *ps->p != '[' && *ps->p != ']' && n + 1 < sizeof w) {
            w[n++] = *ps->p++;
        }
        w[n] = '\0';
        if (n == 0) {
            break;
        }
        int multiple = 0;
        if (n > 3 && strcmp(w + n - 3, "...") == 0) {
            w[n - 3] = '\0';
            multiple = 1;
        }
        if (strcmp(w, "...") == 0 || w[0] == '\0') {
            return -2; /* a lone "...": repeats the previous item */
        }
        int id = node_new(ps, is_upper_word(w) ? ARG_TOKEN : ARG_VALUE);
        if (id < 0) {
            return -1;
        }
        snprintf(ps->nodes[id].word, sizeof ps->nodes[id].word, "%s", w);
        ps->nodes[id].multiple = multiple;
        if (first < 0) {
            first = id;
        } else {
            if (alt < 0) {
                alt = node_new(ps, ARG_ONEOF);
                add_child(ps, alt, first);
            }
            add_child(ps, alt, id);
        }
        if (*ps->p != '|') {
            break;
        }
        ps->p++; /* a|b: tight alternatives */
    }
    return alt >= 0 ? alt : first;
}

/* A TOKEN followed by one VALUE becomes that value with the token. */
static void merge_token_values(parser_t *ps, arg_node_t *block)
{
    int out = 0;
    for (int i = 0; i < block->nchild; i++) {
        arg_node_t *a = &ps->nodes[block->child[i]];
        arg_node_t *b = i + 1 < block->nchild ? &ps->nodes[block->child[i + 1]] : NULL;
        if (a->kind == ARG_TOKEN && b != NULL && b->kind == ARG_VALUE && b->token[0] == '\0' && !a->multiple) {
            memcpy(b->token, a->word, sizeof b->token); /* both are 48 bytes, NUL-terminated */
            block->child[out++] = block->child[++i];
            continue;
        }
        block->child[out++] = block->child[i];
    }
    block->nchild = out;
}

/* A sequence up to end (']' or '\0'), with " | " separating alternatives.
 * Returns a node: the one item, a block, or a one-of. */
static int parse_seq(parser_t *ps, char end)
{
    int alt = -1, block = node_new(ps, ARG_BLOCK);
    if (block < 0) {
        return -1;
    }
    for (;;) {
        skip_blanks(ps);
        if (*ps->p == '\0' || *ps->p == end) {
            break;
        }
        if (*ps->p == '|') { /* " | ": close this alternative */
            ps->p++;
            if (alt < 0) {
                alt = node_new(ps, ARG_ONEOF);
            }
            add_child(ps, alt, block);
            block = node_new(ps, ARG_BLOCK);
            if (block < 0) {
                break;
            }
            continue;
        }
        int item = parse_item(ps);
        if (item == -2) { /* "x ...": the previous item repeats */
            arg_node_t *b = &ps->nodes[block];
            if (b->nchild > 0) {
                ps->nodes[b->child[b->nchild - 1]].multiple = 1;
            }
            continue;
        }
        if (item < 0) {
            break;
        }
        add_child(ps, block, item);
    }
    if (alt >= 0 && block >= 0) {
        add_child(ps, alt, block);
    }
    /* Simplify: token+value pairs; one-child blocks are their child. */
    for (int i = 0; i < ps->n; i++) {
        if (ps->nodes[i].kind == ARG_BLOCK) {
            merge_token_values(ps, &ps->nodes[i]);
        }
    }
    int top = alt >= 0 ? alt : block;
    if (top >= 0 && ps->nodes[top].kind == ARG_ONEOF) {
        arg_node_t *o = &ps->nodes[top];
        for (int i = 0; i < o->nchild; i++) {
            arg_node_t *c = &ps->nodes[o->child[i]];
            if (c->kind == ARG_BLOCK && c->nchild == 1) {
                o->child[i] = c->child[0];
            }
        }
    }
    if (top >= 0 && ps->nodes[top].kind == ARG_BLOCK && ps->nodes[top].nchild == 1) {
        top = ps->nodes[top].child[0];
    }
    return top;
}

static void add_str_field(resp_buf_t *b, const char *k, const char *v)
{
    resp_add_bulk_str(b, k);
    resp_add_bulk_str(b, v);
}

/* One argument map (recursively). */
static void add_arg(resp_buf_t *b, const parser_t *ps, int id, int index)
{
    const arg_node_t *a = &ps->nodes[id];
    char name[64];
    const char *type;
    switch (a->kind) {
    case ARG_VALUE:
        snprintf(name, sizeof name, "%s", a->word);
        type = "string";
        break;
    case ARG_TOKEN:
        snprintf(name, sizeof name, "%s", a->word);
        for (char *p = name; *p; p++) {
            *p = (char)tolower((unsigned char)*p);
        }
        type = "pure-token";
        break;
    case ARG_ONEOF:
        snprintf(name, sizeof name, "choice%d", index);
        type = "oneof";
        break;
    default:
        snprintf(name, sizeof name, "block%d", index);
        type = "block";
        break;
    }
    const char *token = a->kind == ARG_TOKEN ? a->word : a->token;
    int nflags = a->optional + a->multiple;
    int has_children = a->kind == ARG_ONEOF || a->kind == ARG_BLOCK;
    resp_add_map(b, 2 + (token[0] != '\0') + (nflags > 0) + (size_t)has_children +
                        (a->kind == ARG_VALUE || a->kind == ARG_TOKEN));
    add_str_field(b, "name", name);
    add_str_field(b, "type", type);
    if (a->kind == ARG_VALUE || a->kind == ARG_TOKEN) {
        add_str_field(b, "display_text", a->kind == ARG_VALUE ? a->word : name);
    }
    if (token[0] != '\0') {
        add_str_field(b, "token", token);
    }
    if (nflags > 0) {
        resp_add_bulk_str(b, "flags");
        resp_add_set(b, (size_t)nflags);
        if (a->optional) {
            resp_add_simple(b, "optional");
        }
        if (a->multiple) {
            resp_add_simple(b, "multiple");
        }
    }
    if (has_children) {
        resp_add_bulk_str(b, "arguments");
        resp_add_array(b, (size_t)a->nchild);
        for (int i = 0; i < a->nchild; i++) {
            add_arg(b, ps, a->child[i], i);
        }
    }
}

/* The functional group of a command (redis-cli's `help @group`). */
static const char *docs_group(const char *name)
{
    static const char *const messages[] = { "send", "pull", "ack", "nack", "touch", "get", "find", "revoke", "peek" };
    static const char *const consumers[] = { "group", "dlq", "topic" };
    static const char *const connection[] = { "ping", "echo", "hello", "auth", "quit", "client", "select" };
    for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++) {
        if (strcmp(name, messages[i]) == 0) {
            return "messages";
        }
    }
    for (size_t i = 0; i < sizeof consumers / sizeof consumers[0]; i++) {
        if (strcmp(name, consumers[i]) == 0) {
            return "groups";
        }
    }
    for (size_t i = 0; i < sizeof connection / sizeof connection[0]; i++) {
        if (strcmp(name, connection[i]) == 0) {
            return "connection";
        }
    }
    if (strcmp(name, "multi") == 0 || strcmp(name, "exec") == 0 || strcmp(name, "discard") == 0) {
        return "transactions";
    }
    return "server";
}

void cmd_docs_add(resp_buf_t *out, const char *name, const char *syntax, const char *summary)
{
    parser_t ps;
    memset(&ps, 0, sizeof ps);
    ps.p = syntax;
    int top = syntax[0] ? parse_seq(&ps, '\0') : -1;
    /* The top level is a list of arguments: a top block's children. */
    int args[16], nargs = 0;
    if (top >= 0 && ps.nodes[top].kind == ARG_BLOCK && !ps.nodes[top].optional) {
        for (int i = 0; i < ps.nodes[top].nchild && nargs < 16; i++) {
            args[nargs++] = ps.nodes[top].child[i];
        }
    } else if (top >= 0) {
        args[nargs++] = top;
    }
    resp_add_bulk_str(out, name);
    resp_add_map(out, 4);
    add_str_field(out, "summary", summary);
    add_str_field(out, "since", DOCS_SINCE);
    add_str_field(out, "group", docs_group(name));
    resp_add_bulk_str(out, "arguments");
    resp_add_array(out, (size_t)nargs);
    for (int i = 0; i < nargs; i++) {
        add_arg(out, &ps, args[i], i);
    }
}
