/* SPDX-License-Identifier: MIT */
/* minijson.h - just enough JSON to check the bench's output (RFC 8259 grammar). */
#ifndef MINIJSON_H
#define MINIJSON_H

#include <stddef.h>

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jval {
	enum jtype t;
	int b;
	double num;
	char *str;
	size_t n;		/* items (and keys, for objects) */
	struct jval **items;
	char **keys;
};

/* Parse a whole document; NULL with a message in err on any error. */
struct jval *json_parse(const char *s, char *err, size_t errlen);
/* Member of an object, or NULL. */
const struct jval *json_get(const struct jval *obj, const char *key);
void json_free(struct jval *v);

#endif
