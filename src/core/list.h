#ifndef STRAIT_CORE_LIST_H
#define STRAIT_CORE_LIST_H

#include <stddef.h>

/* An intrusive doubly linked list with a sentinel head, as in the Linux
 * kernel and HAProxy: nodes live inside the objects they link. */
struct list {
    struct list *next;
    struct list *prev;
};

#define LIST_INIT(l) ((l)->next = (l)->prev = (l))
#define LIST_EMPTY(l) ((l)->next == (l))
#define LIST_ELEM(ptr, type, member)                                           \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

static inline void list_append(struct list *head, struct list *n)
{
    n->prev = head->prev;
    n->next = head;
    head->prev->next = n;
    head->prev = n;
}

static inline void list_del(struct list *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = n;
}

#endif
