// SPDX-License-Identifier: MIT

#include "textflag.h"

// func tscNow() uint64
//
// RDTSCP waits until every earlier instruction has executed, so a stamp is
// not taken before the work it follows (cli/tsc.h's tsc_now does the same).
// It also writes IA32_TSC_AUX to CX, which we do not need.
TEXT ·tscNow(SB), NOSPLIT, $0-8
	RDTSCP
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET
