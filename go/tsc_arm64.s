// SPDX-License-Identifier: MIT

#include "textflag.h"

// func rdtsc() uint64
TEXT ·rdtsc(SB), NOSPLIT, $0-8
	MRS CNTVCT_EL0, R0
	MOVD R0, ret+0(FP)
	RET
