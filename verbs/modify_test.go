package verbs

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckModify(t *testing.T) {
	rcRTR := QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	rcRTS := QPAttrState | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrSQPSN | QPAttrMaxQPRdAtomic
	attr := func(s QPState) *QPAttr { return &QPAttr{QPState: s, PathMTU: MTU1024, PortNum: 1} }
	tests := []struct {
		name     string
		cur      QPState
		typ      QPType
		attr     *QPAttr
		mask     QPAttrMask
		want     QPState
		err      error
		contains string
	}{
		{"rc reset→init", QPStateReset, QPTypeRC, attr(QPStateInit), QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags, QPStateInit, nil, ""},
		{"rc reset→init missing access", QPStateReset, QPTypeRC, attr(QPStateInit), QPAttrState | QPAttrPKeyIndex | QPAttrPort, QPStateReset, ErrInvalidArgument, "ACCESS_FLAGS"},
		{"ud reset→init needs qkey", QPStateReset, QPTypeUD, attr(QPStateInit), QPAttrState | QPAttrPKeyIndex | QPAttrPort, QPStateReset, ErrInvalidArgument, "QKEY"},
		{"ud reset→init with access", QPStateReset, QPTypeUD, attr(QPStateInit), QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey | QPAttrAccessFlags, QPStateReset, ErrInvalidArgument, "does not allow ACCESS_FLAGS"},
		{"rc init→rtr", QPStateInit, QPTypeRC, attr(QPStateRTR), rcRTR, QPStateRTR, nil, ""},
		{"rc init→rtr missing min_rnr", QPStateInit, QPTypeRC, attr(QPStateRTR), rcRTR &^ QPAttrMinRNRTimer, QPStateInit, ErrInvalidArgument, "MIN_RNR_TIMER"},
		{"uc init→rtr without rd atomic", QPStateInit, QPTypeUC, attr(QPStateRTR), QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN, QPStateRTR, nil, ""},
		{"uc init→rtr with rd atomic", QPStateInit, QPTypeUC, attr(QPStateRTR), rcRTR, QPStateInit, ErrInvalidArgument, "MAX_DEST_RD_ATOMIC"},
		{"ud init→rtr", QPStateInit, QPTypeUD, attr(QPStateRTR), QPAttrState, QPStateRTR, nil, ""},
		{"rc rtr→rts", QPStateRTR, QPTypeRC, attr(QPStateRTS), rcRTS, QPStateRTS, nil, ""},
		{"rc rtr→rts missing timeout", QPStateRTR, QPTypeRC, attr(QPStateRTS), rcRTS &^ QPAttrTimeout, QPStateRTR, ErrInvalidArgument, "TIMEOUT"},
		{"rc reset→rts", QPStateReset, QPTypeRC, attr(QPStateRTS), rcRTS, QPStateReset, ErrInvalidState, "RESET to RTS"},
		{"rc init→rts", QPStateInit, QPTypeRC, attr(QPStateRTS), rcRTS, QPStateInit, ErrInvalidState, "INIT to RTS"},
		{"any→err", QPStateRTS, QPTypeRC, attr(QPStateErr), QPAttrState, QPStateErr, nil, ""},
		{"err→reset", QPStateErr, QPTypeUD, attr(QPStateReset), QPAttrState, QPStateReset, nil, ""},
		{"rts→sqd", QPStateRTS, QPTypeRC, attr(QPStateSQD), QPAttrState, QPStateSQD, nil, ""},
		{"rc sqe→rts", QPStateSQE, QPTypeRC, attr(QPStateRTS), QPAttrState, QPStateSQE, ErrInvalidState, ""},
		{"ud sqe→rts", QPStateSQE, QPTypeUD, attr(QPStateRTS), QPAttrState, QPStateRTS, nil, ""},
		{"rts→rts min rnr", QPStateRTS, QPTypeRC, attr(QPStateRTS), QPAttrMinRNRTimer, QPStateRTS, nil, ""},
		{"bad mtu", QPStateInit, QPTypeRC, &QPAttr{QPState: QPStateRTR, PathMTU: 9}, rcRTR, QPStateInit, ErrInvalidArgument, "PathMTU"},
		{"psn too big", QPStateRTR, QPTypeRC, &QPAttr{QPState: QPStateRTS, SQPSN: 1 << 24}, rcRTS, QPStateRTR, ErrInvalidArgument, "24 bits"},
		{"cur state mismatch", QPStateRTR, QPTypeRC, &QPAttr{QPState: QPStateRTS, CurQPState: QPStateInit}, rcRTS | QPAttrCurState, QPStateRTR, ErrInvalidState, "CUR_STATE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckModify(tc.cur, tc.typ, tc.attr, tc.mask)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil && !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("error %q does not mention %q", err, tc.contains)
			}
			if got != tc.want {
				t.Fatalf("next state %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGID(t *testing.T) {
	g, err := ParseGID("10.77.0.2")
	if err != nil {
		t.Fatal(err)
	}
	if g.String() != "::ffff:10.77.0.2" || g.Addr().String() != "10.77.0.2" {
		t.Fatalf("GID %v / %v", g, g.Addr())
	}
	if _, err := ParseGID("nope"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("ParseGID(nope) = %v", err)
	}
}

func TestMTU(t *testing.T) {
	for _, tt := range []struct {
		m     MTU
		bytes int
		s     string
	}{
		{0, 0, "MTU(0)"}, {MTU256, 256, "256"}, {MTU512, 512, "512"}, {MTU1024, 1024, "1024"},
		{MTU2048, 2048, "2048"}, {MTU4096, 4096, "4096"}, {6, 0, "MTU(6)"}, {255, 0, "MTU(255)"},
	} {
		if tt.m.Bytes() != tt.bytes || tt.m.String() != tt.s || tt.m.Valid() != (tt.bytes != 0) {
			t.Errorf("MTU %d: %d %q", uint8(tt.m), tt.m.Bytes(), tt.m.String())
		}
	}
	for _, tt := range []struct {
		n    int
		want MTU
	}{
		{-1, 0}, {0, 0}, {255, 0}, {256, MTU256}, {511, MTU256}, {512, MTU512}, {1023, MTU512},
		{1024, MTU1024}, {1420, MTU1024}, {2048, MTU2048}, {4095, MTU2048}, {4096, MTU4096}, {65536, MTU4096},
	} {
		if got := MTUFromBytes(tt.n); got != tt.want {
			t.Errorf("MTUFromBytes(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
	for _, tt := range []struct {
		link int
		want MTU
	}{
		{1500, MTU1024}, // as in the rxe captures
		{9000, MTU4096}, // write_bw_mtu4096.pcap
		{1104, MTU1024}, {1103, MTU512},
		{4176, MTU4096}, {4175, MTU2048},
		{576, MTU256}, {100, MTU256}, {0, MTU256}, {65536, MTU4096},
	} {
		if got := MTUFromLinkMTU(tt.link); got != tt.want {
			t.Errorf("MTUFromLinkMTU(%d) = %v, want %v", tt.link, got, tt.want)
		}
	}
}
