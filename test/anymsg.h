/*
 * anymsg: storage for a message of any type the codec speaks, for the code
 * that walks every dt_msg_type (the codec and alloc suites, the codec fuzz
 * target). Test code only: dtrain itself always knows which message it
 * holds, and keeps it in the struct of that type.
 */
#ifndef DT_TEST_ANYMSG_H
#define DT_TEST_ANYMSG_H

#include "codec.h"

typedef union {
    dt_msg_create_req create_req;
    dt_msg_create_resp create_resp;
    dt_msg_pull_req pull_req;
    dt_msg_pull_resp pull_resp;
    dt_msg_push_req push_req;
    dt_msg_push_resp push_resp;
    dt_msg_status_req status_req;
    dt_msg_status_resp status_resp;
    dt_msg_shutdown_req shutdown_req;
    dt_msg_shutdown_resp shutdown_resp;
    dt_msg_health_req health_req;
    dt_msg_health_resp health_resp;
    dt_msg_sparse_pull_req sparse_pull_req;
    dt_msg_sparse_pull_resp sparse_pull_resp;
    dt_msg_sparse_export_req sparse_export_req;
    dt_msg_sparse_export_resp sparse_export_resp;
    dt_msg_sparse_import_req sparse_import_req;
    dt_msg_sparse_import_resp sparse_import_resp;
} dt_test_any_msg;

/* One member per type: a type added to dt_msg_type needs its member here,
 * or decoding it into this union could write past the end. */
_Static_assert(DT_MSG_COUNT == 18, "dt_test_any_msg: add the new message type's member");

#endif
