package plainjson

// maxDepth is how deeply encoding/json lets arrays and objects nest.
const maxDepth = 10000

// Valid reports whether data is valid JSON exactly as json.Valid does
// (encoding/json's grammar and its nesting limit; strings are not checked
// for UTF-8), several times faster: the raw values every order carries
// (orders, results) are checked on each decode.
func Valid(data []byte) bool {
	var inObject [maxDepth/64 + 1]uint64 // by depth: an object, or an array
	depth := 0
	i := skipSpace(data, 0)
	for {
		// A value starts at i.
		if i >= len(data) {
			return false
		}
		ok := true
		switch c := data[i]; c {
		case '{', '[':
			if depth == maxDepth {
				return false
			}
			if c == '{' {
				inObject[depth/64] |= 1 << (depth % 64)
			} else {
				inObject[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == c+2 { // '}' or ']'
				depth--
				i++
				break
			}
			if c == '{' {
				if i, ok = memberName(data, i); !ok {
					return false
				}
			}
			continue
		case '"':
			i, ok = stringEnd(data, i)
		case 't':
			i, ok = literalEnd(data, i, "true")
		case 'f':
			i, ok = literalEnd(data, i, "false")
		case 'n':
			i, ok = literalEnd(data, i, "null")
		default:
			i, ok = numberEnd(data, i)
		}
		if !ok {
			return false
		}
		// After a value: a separator, the end of containers, or of data.
		for {
			i = skipSpace(data, i)
			if depth == 0 {
				return i == len(data)
			}
			if i >= len(data) {
				return false
			}
			object := inObject[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			c := data[i]
			if c == ',' {
				i = skipSpace(data, i+1)
				if object {
					if i, ok = memberName(data, i); !ok {
						return false
					}
				}
				break
			}
			if (object && c != '}') || (!object && c != ']') {
				return false
			}
			depth--
			i++
		}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// memberName moves past a member's name and its colon, to its value.
func memberName(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return i, false
	}
	i, ok := stringEnd(data, i)
	if !ok {
		return i, false
	}
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != ':' {
		return i, false
	}
	return skipSpace(data, i+1), true
}

// stringEnd moves past the string at i.
func stringEnd(data []byte, i int) (int, bool) {
	for i++; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			i++
			if i >= len(data) {
				return i, false
			}
			switch data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(data) {
					return i, false
				}
				for _, h := range data[i+1 : i+5] {
					if (h < '0' || h > '9') && (h < 'a' || h > 'f') && (h < 'A' || h > 'F') {
						return i, false
					}
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

func literalEnd(data []byte, i int, literal string) (int, bool) {
	if len(data)-i < len(literal) || string(data[i:i+len(literal)]) != literal {
		return i, false
	}
	return i + len(literal), true
}

// numberEnd moves past the number at i, in JSON's grammar.
func numberEnd(data []byte, i int) (int, bool) {
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		i = digitsEnd(data, i)
	default:
		return i, false
	}
	if i < len(data) && data[i] == '.' {
		if i++; i >= len(data) || data[i] < '0' || data[i] > '9' {
			return i, false
		}
		i = digitsEnd(data, i)
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || data[i] < '0' || data[i] > '9' {
			return i, false
		}
		i = digitsEnd(data, i)
	}
	return i, true
}

func digitsEnd(data []byte, i int) int {
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		i++
	}
	return i
}
