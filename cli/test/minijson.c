/* SPDX-License-Identifier: MIT */
/* minijson.c - a strict recursive-descent parser; no python needed to test JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "minijson.h"

struct p {
	const char *s;
	char *err;
	size_t errlen;
	int depth;
};

static struct jval *value(struct p *p);

static void *fail(struct p *p, const char *what)
{
	if (!p->err[0])
		snprintf(p->err, p->errlen, "%s at \"%.20s\"", what, p->s);
	return NULL;
}

static void ws(struct p *p)
{
	while (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')
		p->s++;
}

static struct jval *node(enum jtype t)
{
	struct jval *v = calloc(1, sizeof(*v));

	if (v)
		v->t = t;
	return v;
}

static char *string(struct p *p)
{
	size_t cap = 16, n = 0;
	char *out = malloc(cap);

	if (!out || *p->s != '"') {
		free(out);
		return fail(p, "expected a string");
	}
	p->s++;
	for (;;) {
		unsigned char c = (unsigned char)*p->s++;

		if (n + 2 > cap) {
			char *o = realloc(out, cap *= 2);

			if (!o) {
				free(out);
				return fail(p, "out of memory");
			}
			out = o;
		}
		if (c == '"')
			break;
		if (c < 0x20) {
			free(out);
			return fail(p, "control character or end inside a string");
		}
		if (c == '\\') {
			c = (unsigned char)*p->s++;
			switch (c) {
			case '"': case '\\': case '/': break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case 'u':
				for (int i = 0; i < 4; i++)
					if (!strchr("0123456789abcdefABCDEF", p->s[i]) || !p->s[i]) {
						free(out);
						return fail(p, "bad \\u escape");
					}
				p->s += 4;
				c = '?';
				break;
			default:
				free(out);
				return fail(p, "bad escape");
			}
		}
		out[n++] = (char)c;
	}
	out[n] = 0;
	return out;
}

static int digits(struct p *p)
{
	int n = 0;

	while (*p->s >= '0' && *p->s <= '9')
		p->s++, n++;
	return n;
}

static struct jval *number(struct p *p)
{
	const char *start = p->s;
	struct jval *v;

	if (*p->s == '-')
		p->s++;
	if (*p->s == '0')
		p->s++;
	else if (!digits(p))
		return fail(p, "bad number");
	if (*p->s == '.') {
		p->s++;
		if (!digits(p))
			return fail(p, "bad fraction");
	}
	if (*p->s == 'e' || *p->s == 'E') {
		p->s++;
		if (*p->s == '+' || *p->s == '-')
			p->s++;
		if (!digits(p))
			return fail(p, "bad exponent");
	}
	v = node(J_NUM);
	if (v)
		v->num = strtod(start, NULL);
	return v;
}

static int push(struct jval *v, struct jval *item, char *key)
{
	struct jval **it = realloc(v->items, (v->n + 1) * sizeof(*it));
	char **k;

	if (!it)
		return -1;
	v->items = it;
	k = realloc(v->keys, (v->n + 1) * sizeof(*k));
	if (!k)
		return -1;
	v->keys = k;
	v->items[v->n] = item;
	v->keys[v->n++] = key;
	return 0;
}

static struct jval *container(struct p *p, int obj)
{
	struct jval *v = node(obj ? J_OBJ : J_ARR);
	char close = obj ? '}' : ']';

	if (!v)
		return fail(p, "out of memory");
	if (++p->depth > 64) {
		json_free(v);
		return fail(p, "nesting too deep");
	}
	p->s++;
	ws(p);
	if (*p->s == close) {
		p->s++;
		p->depth--;
		return v;
	}
	for (;;) {
		char *key = NULL;
		struct jval *item;

		ws(p);
		if (obj) {
			key = string(p);
			if (!key)
				goto bad;
			ws(p);
			if (*p->s != ':') {
				free(key);
				fail(p, "expected ':'");
				goto bad;
			}
			p->s++;
		}
		item = value(p);
		if (!item || push(v, item, key)) {
			free(key);
			json_free(item);
			goto bad;
		}
		ws(p);
		if (*p->s == ',') {
			p->s++;
			continue;
		}
		if (*p->s == close) {
			p->s++;
			p->depth--;
			return v;
		}
		fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
		goto bad;
	}
bad:
	json_free(v);
	return NULL;
}

static struct jval *value(struct p *p)
{
	struct jval *v;

	ws(p);
	switch (*p->s) {
	case '{':
		return container(p, 1);
	case '[':
		return container(p, 0);
	case '"':
		v = node(J_STR);
		if (v && !(v->str = string(p))) {
			free(v);
			return NULL;
		}
		return v;
	case 't':
	case 'f':
		if (!strncmp(p->s, "true", 4) || !strncmp(p->s, "false", 5)) {
			v = node(J_BOOL);
			if (v)
				v->b = *p->s == 't';
			p->s += *p->s == 't' ? 4 : 5;
			return v;
		}
		break;
	case 'n':
		if (!strncmp(p->s, "null", 4)) {
			p->s += 4;
			return node(J_NULL);
		}
		break;
	default:
		if (*p->s == '-' || (*p->s >= '0' && *p->s <= '9'))
			return number(p);
	}
	return fail(p, "unexpected character");
}

struct jval *json_parse(const char *s, char *err, size_t errlen)
{
	struct p p = { s, err, errlen, 0 };
	struct jval *v;

	err[0] = 0;
	v = value(&p);
	if (!v)
		return NULL;
	ws(&p);
	if (*p.s) {
		json_free(v);
		return fail(&p, "trailing garbage");
	}
	return v;
}

const struct jval *json_get(const struct jval *obj, const char *key)
{
	if (!obj || obj->t != J_OBJ)
		return NULL;
	for (size_t i = 0; i < obj->n; i++)
		if (!strcmp(obj->keys[i], key))
			return obj->items[i];
	return NULL;
}

void json_free(struct jval *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n; i++) {
		json_free(v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->str);
	free(v);
}
