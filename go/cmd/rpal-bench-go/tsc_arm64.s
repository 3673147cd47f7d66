// SPDX-License-Identifier: MIT

#include "textflag.h"

// func tscNow() uint64
//
// The ISB keeps the read from being taken before the work it follows, as
// RDTSCP does on amd64.
TEXT ·tscNow(SB), NOSPLIT, $0-8
	ISB  $15
	MRS  CNTVCT_EL0, R0
	MOVD R0, ret+0(FP)
	RET
