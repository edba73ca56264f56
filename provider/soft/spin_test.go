package soft

import "testing"

// TestSpunOut: a spell of serve's empty polls ends once it has lasted
// spinLimit on the device's clock, looked at every spinLook polls, and
// never while the clock stands still (a virtual clock: spinPolls ends
// those spells).
func TestSpunOut(t *testing.T) {
	clock := newVirtualClock()
	d := &Device{clock: clock}
	var spell = clock.Now()
	if d.spunOut(1, &spell) {
		t.Fatal("the first poll of a spell ended it")
	}
	for idle := 2; idle <= 10*spinLook; idle++ {
		if d.spunOut(idle, &spell) {
			t.Fatalf("poll %d ended a spell while no time passed", idle)
		}
	}
	clock.Jump(spinLimit)
	if d.spunOut(spinLook+1, &spell) {
		t.Fatal("a poll between looks at the clock ended the spell")
	}
	if !d.spunOut(2*spinLook, &spell) {
		t.Fatalf("a spell of %v went on", spinLimit)
	}
	// A new spell starts the count again.
	if d.spunOut(1, &spell) || d.spunOut(spinLook, &spell) {
		t.Fatal("a new spell ended at once")
	}
}
